package authz

import (
	"slices"
	"testing"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance/apperr"
)

func TestCheckProject(t *testing.T) {
	org := &Principal{OrganizationID: "org_a"}
	bound := &Principal{OrganizationID: "org_a", ProjectID: "prj_1"}
	admin := &Principal{IsAdmin: true}
	for _, c := range []struct {
		p           *Principal
		prj, prjOrg string
		want        apperr.Kind
		ok          bool
	}{
		{org, "prj_1", "org_a", 0, true},
		{org, "prj_1", "org_b", apperr.KindNotFound, false}, // another organization's: not revealed
		{bound, "prj_1", "org_a", 0, true},
		{bound, "prj_2", "org_a", apperr.KindForbidden, false},
		{bound, "prj_2", "org_b", apperr.KindNotFound, false},
		{admin, "prj_9", "org_z", 0, true},
	} {
		err := c.p.CheckProject(c.prj, c.prjOrg)
		if c.ok != (err == nil) || (!c.ok && apperr.KindOf(err) != c.want) {
			t.Errorf("%+v CheckProject(%s, %s) = %v", c.p, c.prj, c.prjOrg, err)
		}
	}
}

func TestOrganizationFilter(t *testing.T) {
	if _, err := (&Principal{IsAdmin: true}).OrganizationFilter(""); apperr.KindOf(err) != apperr.KindInvalid {
		t.Errorf("an admin without a filter: %v", err)
	}
	if got, err := (&Principal{IsAdmin: true}).OrganizationFilter("org_b"); err != nil || got != "org_b" {
		t.Errorf("an admin's filter: %q %v", got, err)
	}
	p := &Principal{OrganizationID: "org_a"}
	if got, err := p.OrganizationFilter(""); err != nil || got != "org_a" {
		t.Errorf("own organization: %q %v", got, err)
	}
	if _, err := p.OrganizationFilter("org_b"); apperr.KindOf(err) != apperr.KindNotFound {
		t.Errorf("another organization: %v", err)
	}
}

func TestRolesAndActors(t *testing.T) {
	if !slices.Equal(RoleScopes(RoleOwner), api.AllScopes) || !slices.Equal(RoleScopes(RoleAdmin), api.AllScopes) {
		t.Error("owners and admins carry every scope")
	}
	if RoleGrants(RoleMember, api.ScopeAPIKeysWrite) || !RoleGrants(RoleMember, api.ScopeProjectsWrite) {
		t.Error("members manage projects, not keys")
	}
	if err := (&Principal{IDPOrganizationRole: RoleMember}).RequireAdminRole("x"); apperr.KindOf(err) != apperr.KindForbidden {
		t.Errorf("a member: %v", err)
	}
	if err := (&Principal{AuthSource: ActorSystem}).RequireAdminRole("x"); err != nil {
		t.Errorf("the system: %v", err)
	}
	s := NewSession("usr_1", "ses_1", false)
	if !s.IsSession() || s.SessionID() != "ses_1" || s.Scopes == nil {
		t.Errorf("session: %+v", s)
	}
	for _, c := range []struct {
		p        *Principal
		kind, id string
	}{
		{nil, ActorAnonymous, ""},
		{s, ActorUser, "usr_1"},
		{&Principal{AuthSource: SourceAPIKey, APIKeyID: "key_1"}, ActorAPIKey, "key_1"},
		{&Principal{AuthSource: ActorSystem}, ActorSystem, "appliance"},
	} {
		if k, id := c.p.Actor(); k != c.kind || id != c.id {
			t.Errorf("%+v.Actor() = %s %s", c.p, k, id)
		}
	}
	if !s.SameRights(NewSession("usr_1", "ses_2", false)) || s.SameRights(NewSession("usr_1", "ses_1", true)) {
		t.Error("SameRights compares rights, not the session")
	}
}
