package programapps

import (
	"context"
	"errors"
	"fmt"
	"net/mail"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance/apperr"
	"github.com/theappliance/appliance/appliance/authz"
	"github.com/theappliance/appliance/appliance/billing"
	"github.com/theappliance/appliance/appliance/ids"
	"github.com/theappliance/appliance/store"
)

// The bounds of an application's fields (docs/api-decisions.md, "Program applications and service
// tokens").
const (
	maxName     = 200
	maxEmail    = 254 // RFC 5321's path limit
	maxSegment  = 100
	maxUseCase  = 2000
	maxWebsite  = 300
	maxLocale   = 35
	maxReferral = 200
	maxNote     = 2000
	maxTeamSize = 1_000_000
)

var (
	localeRE = regexp.MustCompile(`^[A-Za-z]{2,8}(-[A-Za-z0-9]{1,8})*$`)
	codeRE   = regexp.MustCompile(`^[A-Za-z0-9_-]{3,40}$`)
)

// Submit stores an application of the public website (status received) and appends
// program_application.received. Only a service token submits (the router admits nothing else; this
// holds for any other caller of the area); each token has its own rate (Deps.Rate), taken before the
// body is judged. An application from the same e-mail address within DuplicateWindow is a 409 naming
// the first.
func (s *Service) Submit(ctx context.Context, p *authz.Principal, req *api.CreateProgramApplicationRequest) (*api.ProgramApplicationResponse, error) {
	if p == nil || !p.IsServiceToken() {
		return nil, apperr.Forbidden("program applications are submitted with a service token (%s…) only", api.ServiceTokenPrefix)
	}
	if wait := s.rate.Wait(p.ServiceTokenID()); wait > 0 {
		return nil, &apperr.Error{Kind: apperr.KindTooMany, RetryAfter: wait,
			Msg: fmt.Sprintf("too many program applications from this service token: %d at once, then one every %s", s.rateBurst(), s.rateEvery())}
	}
	a, err := s.validate(req)
	if err != nil {
		return nil, err
	}
	now := s.now()
	a.ID, a.Status, a.ServiceTokenID, a.CreatedAt, a.UpdatedAt = ids.New("pap"), api.ProgramApplicationReceived, p.ServiceTokenID(), now, now
	err = s.db.Update(func(tx *store.Tx) error {
		prior, err := store.ProgramApplications.Lookup(tx, store.ProgramApplicationsByEmail, a.Email, store.Query{})
		if err != nil {
			return apperr.Internal(err, "read program applications")
		}
		for _, o := range prior { // oldest first: the first one within the window is named
			if now.Sub(o.CreatedAt) < DuplicateWindow {
				return apperr.Conflict("an application from %s was received within the last 24 hours: %s (at %s)", a.Email, o.ID, o.CreatedAt.Format(time.RFC3339))
			}
		}
		if err := store.ProgramApplications.Put(tx, a); err != nil {
			return apperr.Internal(err, "store program application")
		}
		return s.record(tx, p, a, "program_application.receive", EventReceived, nil)
	})
	if err != nil {
		return nil, err
	}
	return &api.ProgramApplicationResponse{ProgramApplication: wireApplication(a)}, nil
}

func (s *Service) rateBurst() int { return s.rate.Burst() }

func (s *Service) rateEvery() time.Duration { return s.rate.Every() }

// validate checks a submission against the spec's rules and the bounds above; it returns the record to
// store (no id yet), its e-mail address lowercased.
func (s *Service) validate(req *api.CreateProgramApplicationRequest) (*store.ProgramApplication, error) {
	a := &store.ProgramApplication{CompanyName: strings.TrimSpace(req.CompanyName), ContactName: strings.TrimSpace(req.ContactName),
		Segment: strings.TrimSpace(req.Segment), UseCase: strings.TrimSpace(req.UseCase), Program: strings.TrimSpace(req.Program),
		TeamSize: req.TeamSize, CompanyWebsite: strings.TrimSpace(req.CompanyWebsite), Locale: strings.TrimSpace(req.Locale),
		ReferralSource: strings.TrimSpace(req.ReferralSource)}
	for _, f := range []struct {
		name, v  string
		min, max int
	}{{"company_name", a.CompanyName, 1, maxName}, {"contact_name", a.ContactName, 1, maxName}, {"segment", a.Segment, 1, maxSegment},
		{"referral_source", a.ReferralSource, 0, maxReferral}} {
		if err := s.host.CheckDisplayText(f.name, f.v, f.min, f.max); err != nil {
			return nil, err
		}
	}
	if err := checkText("use_case", a.UseCase, 1, maxUseCase); err != nil {
		return nil, err
	}
	email, err := checkEmail(req.Email)
	if err != nil {
		return nil, err
	}
	a.Email = email
	if !slices.Contains(api.Enums["Program"], a.Program) {
		return nil, apperr.Invalid("program must be one of %s", strings.Join(api.Enums["Program"], ", "))
	}
	if a.TeamSize < 1 || a.TeamSize > maxTeamSize {
		return nil, apperr.Invalid("team_size must be at least 1 (and at most %d)", maxTeamSize)
	}
	if a.CompanyWebsite != "" {
		if utf8.RuneCountInString(a.CompanyWebsite) > maxWebsite {
			return nil, apperr.Invalid("company_website must be at most %d characters", maxWebsite)
		}
		u, err := url.Parse(a.CompanyWebsite)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
			return nil, apperr.Invalid("company_website must be an http or https URL, such as https://example.com")
		}
	}
	if a.Locale != "" && (len(a.Locale) > maxLocale || !localeRE.MatchString(a.Locale)) {
		return nil, apperr.Invalid("locale must be a language tag such as en or pt-BR (at most %d characters)", maxLocale)
	}
	return a, nil
}

// checkEmail accepts one bare address (no display name, no group) that net/mail parses, at most maxEmail
// characters, with a domain; it returns it lowercased.
func checkEmail(v string) (string, error) {
	v = strings.TrimSpace(v)
	if v == "" {
		return "", apperr.Invalid("email is required")
	}
	if len(v) > maxEmail {
		return "", apperr.Invalid("email must be at most %d characters", maxEmail)
	}
	addr, err := mail.ParseAddress(v)
	if err != nil || addr.Name != "" || addr.Address != v {
		return "", apperr.Invalid("email must be one e-mail address such as name@example.com")
	}
	if _, domain, _ := strings.Cut(addr.Address, "@"); !strings.Contains(domain, ".") || strings.HasPrefix(domain, "[") {
		return "", apperr.Invalid("email must be one e-mail address such as name@example.com (a domain name with a dot)")
	}
	return strings.ToLower(addr.Address), nil
}

// checkText applies the rules of a multi-line text field (a use case, a note): UTF-8, no control
// characters but newlines and tabs, min to max characters.
func checkText(field, v string, min, max int) error {
	if !utf8.ValidString(v) {
		return apperr.Invalid("%s must be valid UTF-8", field)
	}
	for _, r := range v {
		if unicode.IsControl(r) && r != '\n' && r != '\t' && r != '\r' {
			return apperr.Invalid("%s must not contain control characters other than newlines and tabs", field)
		}
	}
	if n := utf8.RuneCountInString(v); n < min || n > max {
		if min == 0 {
			return apperr.Invalid("%s must be at most %d characters", field, max)
		}
		return apperr.Invalid("%s must be %d to %d characters", field, min, max)
	}
	return nil
}

// List lists the applications, newest first, only those of status when one is given.
func (s *Service) List(ctx context.Context, p *authz.Principal, status string, limit int) (*api.ProgramApplicationList, error) {
	if err := p.RequireOperator("reviewing program applications"); err != nil {
		return nil, err
	}
	if status != "" && !slices.Contains(api.Enums["ProgramApplicationStatus"], status) {
		return nil, apperr.Invalid("status must be one of %s", strings.Join(api.Enums["ProgramApplicationStatus"], ", "))
	}
	out := &api.ProgramApplicationList{ProgramApplications: []*api.ProgramApplication{}}
	err := s.db.View(func(tx *store.Tx) error {
		all, err := store.ProgramApplications.All(tx, func(a *store.ProgramApplication) bool { return status == "" || a.Status == status })
		if err != nil {
			return apperr.Internal(err, "list program applications")
		}
		slices.SortFunc(all, func(a, b *store.ProgramApplication) int {
			if c := b.CreatedAt.Compare(a.CreatedAt); c != 0 {
				return c
			}
			return strings.Compare(b.ID, a.ID)
		})
		for i, a := range all {
			if limit > 0 && i >= limit {
				break
			}
			out.ProgramApplications = append(out.ProgramApplications, wireApplication(a))
		}
		return nil
	})
	return out, err
}

// Get reads one application.
func (s *Service) Get(ctx context.Context, p *authz.Principal, id string) (*api.ProgramApplicationResponse, error) {
	if err := p.RequireOperator("reviewing program applications"); err != nil {
		return nil, err
	}
	var out *api.ProgramApplicationResponse
	err := s.db.View(func(tx *store.Tx) error {
		a, err := store.ProgramApplications.Get(tx, id)
		if err != nil {
			return apperr.NotFoundAs(err, "program application %s not found", id)
		}
		out = &api.ProgramApplicationResponse{ProgramApplication: wireApplication(a)}
		return nil
	})
	return out, err
}

// Approve approves a received application: a discount is made at the billing provider (a coupon and its
// promotion code, redeemable once, with the application's id as the idempotency key, so a retry after a
// failure to record it gets the same one), then recorded on the application with the decision, audited,
// and program_application.approved appended. Decided already: 409. Billing off: 409, nothing changes.
func (s *Service) Approve(ctx context.Context, p *authz.Principal, id string, req *api.ApproveProgramApplicationRequest) (*api.ProgramApplicationResponse, error) {
	if err := p.RequireOperator("approving program applications"); err != nil {
		return nil, err
	}
	note := strings.TrimSpace(req.OperatorNote)
	if err := checkText("operator_note", note, 0, maxNote); err != nil {
		return nil, err
	}
	code := strings.TrimSpace(req.Code)
	if code != "" && !codeRE.MatchString(code) {
		return nil, apperr.Invalid("code must be 3 to 40 letters, digits, - or _")
	}
	a, err := s.undecided(id)
	if err != nil {
		return nil, err
	}
	d, err := s.discounts.CreateDiscount(ctx, billing.DiscountSpec{Name: programName(a.Program), PercentOff: req.PercentOff,
		DurationMonths: req.DurationMonths, Code: code, MaxRedemptions: 1, IdempotencyKey: a.ID,
		Metadata: map[string]string{"program_application_id": a.ID, "program": a.Program, "company_name": truncate(a.CompanyName, 100)}})
	if err != nil {
		var ae *apperr.Error
		if errors.As(err, &ae) {
			return nil, err
		}
		return nil, apperr.Internal(err, "create the discount at the billing provider")
	}
	return s.decide(p, id, api.ProgramApplicationApproved, "program_application.approve", EventApproved, func(a *store.ProgramApplication) {
		a.DiscountID, a.DiscountCode, a.OperatorNote = d.ID, d.Code, note
	}, map[string]any{"discount_id": d.ID, "percent_off": req.PercentOff, "duration_months": req.DurationMonths})
}

// Reject rejects a received application with the operator's note, audited, and appends
// program_application.rejected. Decided already: 409.
func (s *Service) Reject(ctx context.Context, p *authz.Principal, id string, req *api.RejectProgramApplicationRequest) (*api.ProgramApplicationResponse, error) {
	if err := p.RequireOperator("rejecting program applications"); err != nil {
		return nil, err
	}
	note := strings.TrimSpace(req.OperatorNote)
	if err := checkText("operator_note", note, 0, maxNote); err != nil {
		return nil, err
	}
	if _, err := s.undecided(id); err != nil {
		return nil, err
	}
	return s.decide(p, id, api.ProgramApplicationRejected, "program_application.reject", EventRejected, func(a *store.ProgramApplication) {
		a.OperatorNote = note
	}, nil)
}

// undecided reads an application that is still received: 404 when there is none, 409 once decided.
func (s *Service) undecided(id string) (*store.ProgramApplication, error) {
	var a *store.ProgramApplication
	err := s.db.View(func(tx *store.Tx) error {
		var err error
		if a, err = store.ProgramApplications.Get(tx, id); err != nil {
			return apperr.NotFoundAs(err, "program application %s not found", id)
		}
		return decidedAlready(a)
	})
	return a, err
}

func decidedAlready(a *store.ProgramApplication) error {
	if a.Status == api.ProgramApplicationReceived {
		return nil
	}
	return apperr.Conflict("program application %s was %s already (at %s, by %s)", a.ID, a.Status, a.DecidedAt.Format(time.RFC3339), a.DecidedByUserID)
}

// decide records an operator's decision on a received application in one transaction (a decision that
// came first in the meantime wins: 409).
func (s *Service) decide(p *authz.Principal, id, status, action, event string, set func(*store.ProgramApplication), meta map[string]any) (*api.ProgramApplicationResponse, error) {
	var out *api.ProgramApplicationResponse
	err := s.db.Update(func(tx *store.Tx) error {
		a, err := store.ProgramApplications.Get(tx, id)
		if err != nil {
			return apperr.NotFoundAs(err, "program application %s not found", id)
		}
		if err := decidedAlready(a); err != nil {
			return err
		}
		now := s.now()
		set(a)
		a.Status, a.DecidedByUserID, a.DecidedAt, a.UpdatedAt = status, p.UserID, ptr(now), now
		if err := store.ProgramApplications.Put(tx, a); err != nil {
			return apperr.Internal(err, "store program application")
		}
		out = &api.ProgramApplicationResponse{ProgramApplication: wireApplication(a)}
		return s.record(tx, p, a, action, event, meta)
	})
	return out, err
}

// record audits a change of an application and appends its event, both under the platform organization.
func (s *Service) record(tx *store.Tx, p *authz.Principal, a *store.ProgramApplication, action, event string, meta map[string]any) error {
	m := map[string]any{"program_application_id": a.ID, "program": a.Program, "email": a.Email, "status": a.Status}
	for k, v := range meta {
		m[k] = v
	}
	if err := s.audit(tx, p, action, m); err != nil {
		return err
	}
	org := s.host.PlatformOrganization(tx)
	if err := s.host.AppendEvent(tx, event, org, "", map[string]any{"program_application": wireApplication(a)}); err != nil {
		return apperr.Internal(err, "append event")
	}
	return nil
}

// programName is the discount's name on invoices (Stripe's coupon names are at most 40 characters).
func programName(program string) string {
	if program == "" {
		return "Program"
	}
	return strings.ToUpper(program[:1]) + program[1:] + " program"
}

func truncate(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return string([]rune(s)[:n])
}
