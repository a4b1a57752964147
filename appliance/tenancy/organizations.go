package tenancy

import (
	"context"
	"errors"
	"regexp"
	"slices"
	"strings"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance/apperr"
	"github.com/theappliance/appliance/appliance/authz"
	"github.com/theappliance/appliance/appliance/ids"
	"github.com/theappliance/appliance/store"
)

var slugRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{1,38})[a-z0-9]$`)

// CreateOrganization makes an organization, with its first owner when owner_email names one.
func (s *Service) CreateOrganization(ctx context.Context, p *authz.Principal, req *api.CreateOrganizationRequest) (*api.CreatedOrganization, error) {
	if err := p.RequireOperator("managing organizations"); err != nil {
		return nil, err
	}
	name, slug, explicit, err := s.orgName(req.Name, req.Slug)
	if err != nil {
		return nil, err
	}
	owner := strings.ToLower(strings.TrimSpace(req.OwnerEmail))
	var out *api.CreatedOrganization
	err = s.db.Update(func(tx *store.Tx) error {
		org, err := s.newOrganization(tx, name, slug, explicit)
		if err != nil {
			return err
		}
		out = &api.CreatedOrganization{Organization: wireOrganization(org)}
		meta := map[string]any{"name": name, "slug": org.Slug}
		if owner != "" {
			u, password, err := s.addOwner(tx, org.ID, owner)
			if err != nil {
				return err
			}
			out.Owner = &api.Member{UserID: u.ID, Email: u.Email, Name: u.Name, Role: authz.RoleOwner, CreatedAt: u.CreatedAt}
			out.InitialPassword = password
			meta["owner_user_id"] = u.ID
		}
		if err := s.host.Audit(tx, p, "organization.create", org.ID, "", meta); err != nil {
			return apperr.Internal(err, "audit")
		}
		return nil
	})
	return out, err
}

// orgName checks a new organization's name and slug (made from the name when not given).
func (s *Service) orgName(name, slug string) (string, string, bool, error) {
	name = strings.TrimSpace(name)
	if err := s.host.CheckDisplayText("name", name, 1, 100); err != nil {
		return "", "", false, err
	}
	explicit := slug != ""
	if !explicit {
		slug = strings.Trim(s.host.Slug(name), "-")
		if len(slug) > 40 {
			slug = strings.TrimRight(slug[:40], "-")
		}
		for len(slug) < 3 {
			slug += "-org"
			slug = strings.TrimLeft(slug, "-")
		}
	}
	if !slugRE.MatchString(slug) {
		return "", "", false, apperr.Invalid("slug must be 3 to 40 lowercase letters, digits or dashes, starting and ending with a letter or digit")
	}
	return name, slug, explicit, nil
}

// newOrganization stores a new organization in tx under slug (a made-up slug taken gets a suffix; an
// explicit one taken is a 409): operators' creations and sign-ups alike.
func (s *Service) newOrganization(tx *store.Tx, name, slug string, explicit bool) (*store.Organization, error) {
	base := slug
	for n := 2; ; n++ {
		if _, err := store.Organizations.First(tx, store.OrganizationsBySlug, slug); errors.Is(err, store.ErrNotFound) {
			break
		} else if err != nil {
			return nil, apperr.Internal(err, "read organizations")
		}
		if explicit {
			return nil, apperr.Conflict("slug %s is taken", slug)
		}
		slug = strings.TrimRight(base[:min(len(base), 36)], "-") + "-" + ids.Secret(3)[:3]
		if n > 20 {
			return nil, apperr.Conflict("no free slug for %q: give one", name)
		}
	}
	now := s.now()
	org := &store.Organization{ID: ids.New("org"), Name: name, Slug: slug, BillingPlan: "none", CreatedAt: now, UpdatedAt: now}
	if err := store.Organizations.Put(tx, org); err != nil {
		return nil, apperr.Internal(err, "store organization")
	}
	return org, nil
}

// addOwner makes email the organization's owner: an existing user joins at once (an operator's act, not
// an invitation); a new email gets a user with a generated password, returned.
func (s *Service) addOwner(tx *store.Tx, orgID, email string) (*store.User, string, error) {
	u, err := store.Users.First(tx, store.UsersByEmail, email)
	if errors.Is(err, store.ErrNotFound) {
		password := ids.Secret(15)
		u, err := s.host.CreateUser(tx, email, "", password, false, store.Membership{OrganizationID: orgID, Role: authz.RoleOwner})
		return u, password, err
	}
	if err != nil {
		return nil, "", apperr.Internal(err, "read user")
	}
	u.Memberships = append(u.Memberships, store.Membership{OrganizationID: orgID, Role: authz.RoleOwner})
	u.UpdatedAt = s.now()
	if err := store.Users.Put(tx, u); err != nil {
		return nil, "", apperr.Internal(err, "store user")
	}
	return u, "", nil
}

// ListOrganizations lists every organization with its counts of projects and members, oldest first.
func (s *Service) ListOrganizations(ctx context.Context, p *authz.Principal) (*api.OrganizationList, error) {
	if err := p.RequireOperator("managing organizations"); err != nil {
		return nil, err
	}
	out := &api.OrganizationList{Organizations: []api.OrganizationSummary{}}
	err := s.db.View(func(tx *store.Tx) error {
		orgs, err := store.Organizations.All(tx, nil)
		if err != nil {
			return apperr.Internal(err, "list organizations")
		}
		users, err := store.Users.All(tx, nil)
		if err != nil {
			return apperr.Internal(err, "list users")
		}
		slices.SortFunc(orgs, func(a, b *store.Organization) int { return a.CreatedAt.Compare(b.CreatedAt) })
		for _, o := range orgs {
			live, err := liveProjects(tx, o.ID)
			if err != nil {
				return err
			}
			members := 0
			for _, u := range users {
				if u.Role(o.ID) != "" {
					members++
				}
			}
			q, _, _, err := s.QuotaIn(tx, o.ID)
			if err != nil {
				return apperr.Internal(err, "read quota")
			}
			out.Organizations = append(out.Organizations, api.OrganizationSummary{Organization: *wireOrganization(o),
				ProjectCount: len(live), MemberCount: members, Quota: q})
		}
		return nil
	})
	return out, err
}

// liveProjects are the organization's projects not deleted (nor being deleted).
func liveProjects(tx *store.Tx, orgID string) ([]*store.Project, error) {
	prjs, err := store.Projects.Lookup(tx, store.ProjectsByOrg, orgID, store.Query{})
	if err != nil {
		return nil, apperr.Internal(err, "list projects")
	}
	return slices.DeleteFunc(prjs, func(p *store.Project) bool {
		return p.State == api.ProjectDeleted || p.State == api.ProjectDeleting
	}), nil
}

// SuspendOrganization suspends an organization with a reason: from the commit on, its API keys and
// sessions are refused (the identity area reads suspended_at on each authentication), and a project.stop
// job per project stops its server and pooler, keeping the data.
func (s *Service) SuspendOrganization(ctx context.Context, p *authz.Principal, orgID string, req *api.SuspendOrganizationRequest) (*api.OrganizationJobs, error) {
	if err := p.RequireOperator("managing organizations"); err != nil {
		return nil, err
	}
	reason := strings.TrimSpace(req.Reason)
	if err := s.host.CheckDisplayText("reason", reason, 1, 500); err != nil {
		return nil, err
	}
	return s.setSuspended(p, orgID, func(org *store.Organization) error {
		if org.SuspendedAt != nil {
			return apperr.Conflict("organization %s is suspended already (since %s: %s)", orgID, org.SuspendedAt.Format("2006-01-02T15:04:05Z"), org.SuspendedReason)
		}
		org.SuspendedAt, org.SuspendedReason = ptr(s.now()), reason
		return nil
	}, JobStop, "organization.suspend", map[string]any{"reason": reason})
}

// ResumeOrganization lifts a suspension: its keys and sessions work again at once, and a project.start
// job per project starts its server again (followed by a project.apply_plan job when its plan changed
// during the suspension).
func (s *Service) ResumeOrganization(ctx context.Context, p *authz.Principal, orgID string) (*api.OrganizationJobs, error) {
	if err := p.RequireOperator("managing organizations"); err != nil {
		return nil, err
	}
	return s.setSuspended(p, orgID, func(org *store.Organization) error {
		if org.SuspendedAt == nil {
			return apperr.Conflict("organization %s is not suspended", orgID)
		}
		org.SuspendedAt, org.SuspendedReason = nil, ""
		return nil
	}, JobStart, "organization.resume", nil)
}

// setSuspended changes the organization's suspension with change, then queues jobType on each of its
// live projects (locked by the project: after any job that holds it, so a provision running now is
// stopped once done), and audits action.
func (s *Service) setSuspended(p *authz.Principal, orgID string, change func(*store.Organization) error, jobType, action string, meta map[string]any) (*api.OrganizationJobs, error) {
	var out *api.OrganizationJobs
	err := s.db.Update(func(tx *store.Tx) error {
		org, err := store.Organizations.Get(tx, orgID)
		if err != nil {
			return apperr.NotFoundAs(err, "organization %s not found", orgID)
		}
		since := org.SuspendedAt
		if err := change(org); err != nil {
			return err
		}
		org.UpdatedAt = s.now()
		if err := store.Organizations.Put(tx, org); err != nil {
			return apperr.Internal(err, "store organization")
		}
		prjs, err := liveProjects(tx, orgID)
		if err != nil {
			return err
		}
		out = &api.OrganizationJobs{Organization: wireOrganization(org), Jobs: []*api.Job{}}
		jobIDs := []string{}
		for _, prj := range prjs {
			j, err := s.host.Enqueue(tx, prj, jobType, prj.ID, nil)
			if err != nil {
				return err
			}
			out.Jobs = append(out.Jobs, s.host.JobView(j))
			jobIDs = append(jobIDs, j.ID)
			if jobType != JobStart || since == nil || prj.State != api.ProjectActive || prj.PrimaryInstanceID == "" {
				continue
			}
			if pl, err := store.Plans.Get(tx, prj.Plan); err == nil && pl.UpdatedAt.After(*since) {
				j, err := s.host.ApplyPlan(tx, prj)
				if err != nil {
					return err
				}
				out.Jobs = append(out.Jobs, s.host.JobView(j))
				jobIDs = append(jobIDs, j.ID)
			}
		}
		if meta == nil {
			meta = map[string]any{}
		}
		meta["job_ids"] = jobIDs
		if err := s.host.Audit(tx, p, action, orgID, "", meta); err != nil {
			return apperr.Internal(err, "audit")
		}
		return nil
	})
	if err == nil {
		s.host.Notify()
	}
	return out, err
}

// DeleteOrganization deletes an organization that has no project left (409 otherwise: its projects are
// deleted first, each with its own job and approvals): its API keys are revoked, its members' memberships
// and its invitations end; the users stay. Its audit events stay too.
func (s *Service) DeleteOrganization(ctx context.Context, p *authz.Principal, orgID string) (*api.DeletedOrganization, error) {
	if err := p.RequireOperator("managing organizations"); err != nil {
		return nil, err
	}
	var out *api.DeletedOrganization
	err := s.db.Update(func(tx *store.Tx) error {
		out = &api.DeletedOrganization{Deleted: true, RevokedAPIKeys: []string{}} // a run again starts over
		org, err := store.Organizations.Get(tx, orgID)
		if err != nil {
			return apperr.NotFoundAs(err, "organization %s not found", orgID)
		}
		prjs, err := store.Projects.Lookup(tx, store.ProjectsByOrg, orgID, store.Query{})
		if err != nil {
			return apperr.Internal(err, "list projects")
		}
		left := []string{}
		for _, prj := range prjs {
			if prj.State != api.ProjectDeleted {
				left = append(left, prj.ID)
			}
		}
		if len(left) > 0 {
			return apperr.Conflict("organization %s still has %d project(s) (%s): delete them first", orgID, len(left), strings.Join(left[:min(len(left), 5)], ", "))
		}
		now := s.now()
		keys, err := store.APIKeys.Lookup(tx, store.APIKeysByOrg, orgID, store.Query{})
		if err != nil {
			return apperr.Internal(err, "list keys")
		}
		for _, k := range keys {
			if k.RevokedAt != nil {
				continue
			}
			k.RevokedAt = ptr(now)
			if err := store.APIKeys.Put(tx, k); err != nil {
				return apperr.Internal(err, "revoke key")
			}
			if err := s.host.RecordKeyRevocation(k.KeyHash); err != nil {
				return apperr.Internal(err, "record revocation")
			}
			out.RevokedAPIKeys = append(out.RevokedAPIKeys, k.ID)
		}
		users, err := store.Users.All(tx, func(u *store.User) bool { return u.Role(orgID) != "" })
		if err != nil {
			return apperr.Internal(err, "list users")
		}
		for _, u := range users {
			u.Memberships = slices.DeleteFunc(u.Memberships, func(m store.Membership) bool { return m.OrganizationID == orgID })
			u.UpdatedAt = now
			if err := store.Users.Put(tx, u); err != nil {
				return apperr.Internal(err, "store user")
			}
			out.RemovedMembers++
		}
		invs, err := store.Invitations.Lookup(tx, store.InvitationsByOrg, orgID, store.Query{})
		if err != nil {
			return apperr.Internal(err, "list invitations")
		}
		for _, inv := range invs {
			if err := store.Invitations.Delete(tx, inv.ID); err != nil {
				return apperr.Internal(err, "delete invitation")
			}
		}
		if err := store.OrganizationQuotas.Delete(tx, org.ID); err != nil && !errors.Is(err, store.ErrNotFound) {
			return apperr.Internal(err, "delete quota")
		}
		if err := store.Organizations.Delete(tx, org.ID); err != nil {
			return apperr.Internal(err, "delete organization")
		}
		if err := s.host.Audit(tx, p, "organization.delete", orgID, "", map[string]any{"name": org.Name, "slug": org.Slug,
			"revoked_api_keys": out.RevokedAPIKeys, "removed_members": out.RemovedMembers}); err != nil {
			return apperr.Internal(err, "audit")
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func ptr[T any](v T) *T { return &v }
