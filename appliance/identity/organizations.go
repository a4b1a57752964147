package identity

import (
	"context"
	"errors"
	"net/mail"
	"regexp"
	"strings"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance/apperr"
	"github.com/theappliance/appliance/appliance/authz"
	"github.com/theappliance/appliance/store"
)

// Me describes the caller and its organization.
func (s *Service) Me(ctx context.Context, p *authz.Principal) (*api.MeResponse, error) {
	out := &api.MeResponse{Principal: wirePrincipal(p)}
	err := s.db.View(func(tx *store.Tx) error {
		if p.UserID != "" {
			u, err := store.Users.Get(tx, p.UserID)
			switch {
			case err == nil:
				out.User = &api.MeUser{ID: u.ID, Email: u.Email, Name: u.Name}
			case !errors.Is(err, store.ErrNotFound):
				return apperr.Internal(err, "read the user")
			}
		}
		if p.OrganizationID == "" {
			return nil
		}
		org, err := store.Organizations.Get(tx, p.OrganizationID)
		if err != nil {
			return apperr.NotFoundAs(err, "organization %s not found", p.OrganizationID)
		}
		if !p.IsAdmin && !p.Has(api.ScopeOrganizationsRead) {
			org = orgSummary(org)
		}
		out.Organization = wireOrganization(org)
		return nil
	})
	return out, err
}

// orgSummary is what a caller that may not read its organization (a project-scoped key) learns of it in
// /v1/me: who it is and whether it is suspended; billing and integration fields stay empty.
func orgSummary(o *store.Organization) *store.Organization {
	return &store.Organization{ID: o.ID, Name: o.Name, Slug: o.Slug, IDPOrganizationID: o.IDPOrganizationID,
		IDPOrganizationSlug: o.IDPOrganizationSlug, SuspendedReason: o.SuspendedReason, SuspendedAt: o.SuspendedAt,
		CreatedAt: o.CreatedAt, UpdatedAt: o.UpdatedAt}
}

// GetOrganization returns one organization the caller may see.
func (s *Service) GetOrganization(ctx context.Context, p *authz.Principal, orgID string) (*api.OrganizationResponse, error) {
	if err := p.CheckOrganization(orgID); err != nil {
		return nil, err
	}
	var out *api.OrganizationResponse
	err := s.db.View(func(tx *store.Tx) error {
		org, err := store.Organizations.Get(tx, orgID)
		if err != nil {
			return apperr.NotFoundAs(err, "organization %s not found", orgID)
		}
		out = &api.OrganizationResponse{Organization: wireOrganization(org)}
		return nil
	})
	return out, err
}

var slugRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{1,38})[a-z0-9]$`)

// PatchOrganization changes the profile; an empty body changes nothing and still answers the organization.
func (s *Service) PatchOrganization(ctx context.Context, p *authz.Principal, orgID string, req *api.PatchOrganizationRequest) (*api.OrganizationResponse, error) {
	if err := p.CheckOrganization(orgID); err != nil {
		return nil, err
	}
	if req.Name != nil {
		if err := s.host.CheckDisplayText("name", strings.TrimSpace(*req.Name), 1, 100); err != nil {
			return nil, err
		}
	}
	if req.Slug != nil && !slugRE.MatchString(*req.Slug) {
		return nil, apperr.Invalid("slug must be 3 to 40 lowercase letters, digits or dashes, starting and ending with a letter or digit")
	}
	if req.BillingEmail != nil && *req.BillingEmail != "" {
		if a, err := mail.ParseAddress(*req.BillingEmail); err != nil || a.Address != *req.BillingEmail {
			return nil, apperr.Invalid("billing_email is not a valid email address")
		}
	}
	if req.BillingName != nil {
		if err := s.host.CheckDisplayText("billing_name", *req.BillingName, 0, 200); err != nil {
			return nil, err
		}
	}
	var out *api.OrganizationResponse
	err := s.db.Update(func(tx *store.Tx) error {
		org, err := store.Organizations.Get(tx, orgID)
		if err != nil {
			return apperr.NotFoundAs(err, "organization %s not found", orgID)
		}
		changed := map[string]any{}
		if req.Name != nil {
			org.Name = strings.TrimSpace(*req.Name)
			changed["name"] = org.Name
		}
		if req.Slug != nil && *req.Slug != org.Slug {
			if other, err := store.Organizations.First(tx, store.OrganizationsBySlug, *req.Slug); err == nil && other.ID != org.ID {
				return apperr.Conflict("slug %s is taken", *req.Slug)
			}
			org.Slug = *req.Slug
			changed["slug"] = org.Slug
		}
		if req.BillingEmail != nil {
			org.BillingEmail = *req.BillingEmail
			changed["billing_email"] = org.BillingEmail
		}
		if req.BillingName != nil {
			org.BillingName = *req.BillingName
			changed["billing_name"] = org.BillingName
		}
		if len(changed) > 0 {
			org.UpdatedAt = s.now()
			if err := store.Organizations.Put(tx, org); err != nil {
				return apperr.Internal(err, "store organization")
			}
			s.noteOrg(tx, org)
			if err := s.host.Audit(tx, p, "organization.update", orgID, "", changed); err != nil {
				return apperr.Internal(err, "audit")
			}
		}
		out = &api.OrganizationResponse{Organization: wireOrganization(org)}
		return nil
	})
	return out, err
}
