package httpapi

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// TestSignupOrgInvites: an organization's owner mints, lists and revokes its own sign-up invites (a
// sign-up with one makes a new organization, in invite mode); its members and admins get 403; another
// organization's owner sees and revokes none of them; operators list every invite.
func TestSignupOrgInvites(t *testing.T) {
	b := setup(t)
	if err := b.svc.Tenancy().SetSignupMode("invite"); err != nil {
		t.Fatal(err)
	}
	path := "/v1/organizations/" + b.org.ID + "/signup-invites"
	owner, admin, member, op := b.session("owner"), b.session("admin"), b.session("member"), b.session("platform-admin")
	for name, cred := range map[string]string{"admin": admin, "member": member} {
		before := b.counts()
		if r := b.do("POST", path, cred, map[string]any{}); r.status != http.StatusForbidden || name == "admin" && !strings.Contains(fmt.Sprint(r.json["error"]), "owner role") {
			t.Errorf("an organization %s minted an invite: %d %s", name, r.status, r.body)
		}
		if r := b.do("GET", path, cred, nil); r.status != http.StatusForbidden {
			t.Errorf("an organization %s listed the invites: %d %s", name, r.status, r.body)
		}
		if after := b.counts(); after != before {
			t.Errorf("a refused mint stored something: %v → %v", before, after)
		}
	}
	mint := func(note string) (id, token string) {
		t.Helper()
		r := b.do("POST", path, owner, map[string]any{"note": note})
		if r.status != http.StatusCreated {
			t.Fatalf("the owner mints an invite: %d %s", r.status, r.body)
		}
		inv := r.json["signup_invite"].(map[string]any)
		if inv["invited_by_organization_id"] != b.org.ID || inv["created_by_user_id"] == "" || inv["state"] != "pending" ||
			!strings.HasSuffix(r.json["url"].(string), "/signup?invite="+r.json["token"].(string)) {
			t.Fatalf("minted: %s", r.body)
		}
		return inv["id"].(string), r.json["token"].(string)
	}
	id1, tok1 := mint("for a friend")
	id2, _ := mint("for another friend")
	opInv := b.do("POST", "/v1/signup-invites", op, map[string]any{"note": "the operator's"})
	if opInv.status != http.StatusCreated || opInv.json["signup_invite"].(map[string]any)["invited_by_organization_id"] != "" {
		t.Fatalf("an operator's invite: %d %s", opInv.status, opInv.body)
	}
	opID := opInv.json["signup_invite"].(map[string]any)["id"].(string)

	// The owner's list: its two invites, newest first; not the operator's.
	r := b.do("GET", path, owner, nil)
	if r.status != http.StatusOK {
		t.Fatalf("the owner lists: %d %s", r.status, r.body)
	}
	if got := inviteIDs(r); len(got) != 2 || got[0] != id2 || got[1] != id1 {
		t.Fatalf("the owner's list: %v, want [%s %s]", got, id2, id1)
	}
	// Operators list every invite.
	if got := inviteIDs(b.do("GET", "/v1/signup-invites", op, nil)); len(got) != 3 {
		t.Fatalf("the operators' list: %v", got)
	}
	// The owner may not revoke the operator's invite through the organization's route.
	if r := b.do("DELETE", path+"/"+opID, owner, nil); r.status != http.StatusNotFound {
		t.Fatalf("the owner revoked the operator's invite: %d %s", r.status, r.body)
	}

	// A sign-up with the owner's invite makes a new organization.
	s := b.signup(map[string]any{"email": "friend@example.com", "password": "a long enough password", "organization_name": "Friend Co", "invite_token": tok1})
	if s.status != http.StatusCreated {
		t.Fatalf("sign-up with the owner's invite: %d %s", s.status, s.body)
	}
	newOrg := s.json["organization"].(map[string]any)["id"].(string)
	if newOrg == b.org.ID {
		t.Fatal("the sign-up joined the inviting organization")
	}
	other := s.json["session"].(map[string]any)["token"].(string) // the owner of another organization

	// Another organization's owner sees none of b.org's invites and revokes none.
	if r := b.do("GET", path, other, nil); r.status != http.StatusNotFound {
		t.Errorf("another organization's owner listed the invites: %d %s", r.status, r.body)
	}
	if r := b.do("DELETE", path+"/"+id2, other, nil); r.status != http.StatusNotFound {
		t.Errorf("another organization's owner revoked an invite: %d %s", r.status, r.body)
	}
	otherPath := "/v1/organizations/" + newOrg + "/signup-invites"
	if r := b.do("GET", otherPath, other, nil); r.status != http.StatusOK || len(inviteIDs(r)) != 0 {
		t.Errorf("the new organization's own list: %d %s", r.status, r.body)
	}
	if r := b.do("DELETE", otherPath+"/"+id2, other, nil); r.status != http.StatusNotFound {
		t.Errorf("another organization's owner revoked an invite through its own path: %d %s", r.status, r.body)
	}

	// The owner revokes its pending invite (409 once used or revoked); the list shows the states.
	if r := b.do("DELETE", path+"/"+id2, owner, nil); r.status != http.StatusOK || r.json["signup_invite"].(map[string]any)["state"] != "revoked" {
		t.Fatalf("the owner revokes: %d %s", r.status, r.body)
	}
	for _, id := range []string{id1, id2} {
		if r := b.do("DELETE", path+"/"+id, owner, nil); r.status != http.StatusConflict {
			t.Errorf("revoke %s again: %d %s", id, r.status, r.body)
		}
	}
	r = b.do("GET", path, owner, nil)
	invs := r.json["signup_invites"].([]any)
	if st := invs[1].(map[string]any); st["state"] != "used" || st["organization_id"] != newOrg {
		t.Errorf("the used invite: %v", st)
	}
	if st := invs[0].(map[string]any); st["state"] != "revoked" {
		t.Errorf("the revoked invite: %v", st)
	}
	audited := 0
	for _, e := range b.auditEvents() {
		if (e.Action == "signup_invite.create" || e.Action == "signup_invite.revoke") && e.OrganizationID == b.org.ID {
			audited++
		}
	}
	if audited != 3 {
		t.Errorf("%d audit events of the organization's invites, want 3", audited)
	}
}

func inviteIDs(r *response) []string {
	out := []string{}
	list, _ := r.json["signup_invites"].([]any)
	for _, inv := range list {
		out = append(out, inv.(map[string]any)["id"].(string))
	}
	return out
}

// TestReferralOperatorList: GET /v1/referrals lists every referral for operators, newest first, filtered
// by status; anyone else gets 403.
func TestReferralOperatorList(t *testing.T) {
	b := setup(t)
	if err := b.svc.Tenancy().SetSignupMode("open"); err != nil {
		t.Fatal(err)
	}
	rc := b.do("POST", "/v1/organizations/"+b.org.ID+"/referral-code", b.adminKey, map[string]any{})
	if rc.status != http.StatusOK {
		t.Fatalf("make the referral code: %d %s", rc.status, rc.body)
	}
	code := rc.json["referral_code"].(map[string]any)["code"].(string)
	var referred []string
	for _, email := range []string{"one@example.com", "two@example.com"} {
		s := b.signup(map[string]any{"email": email, "password": "a long enough password", "organization_name": "Referred " + email, "referral_code": code})
		if s.status != http.StatusCreated || s.json["referral_code_status"] != "applied" {
			t.Fatalf("sign-up with the code: %d %s", s.status, s.body)
		}
		referred = append(referred, s.json["organization"].(map[string]any)["id"].(string))
	}
	op := b.session("platform-admin")
	r := b.do("GET", "/v1/referrals", op, nil)
	if r.status != http.StatusOK {
		t.Fatalf("operators list referrals: %d %s", r.status, r.body)
	}
	list := r.json["referrals"].([]any)
	if len(list) != 2 || list[0].(map[string]any)["referred_organization_id"] != referred[1] ||
		list[1].(map[string]any)["referred_organization_id"] != referred[0] || list[0].(map[string]any)["referrer_organization_id"] != b.org.ID {
		t.Fatalf("the referrals, newest first: %s", r.body)
	}
	if r := b.do("GET", "/v1/referrals?status=pending", op, nil); len(r.json["referrals"].([]any)) != 2 {
		t.Errorf("pending: %s", r.body)
	}
	if r := b.do("GET", "/v1/referrals?status=rewarded", op, nil); r.status != http.StatusOK || len(r.json["referrals"].([]any)) != 0 {
		t.Errorf("rewarded: %d %s", r.status, r.body)
	}
	if r := b.do("GET", "/v1/referrals?status=paid", op, nil); r.status != http.StatusBadRequest {
		t.Errorf("an unknown status: %d %s", r.status, r.body)
	}
	for name, cred := range map[string]string{"owner": b.session("owner"), "owner's key": b.adminKey} {
		if r := b.do("GET", "/v1/referrals", cred, nil); r.status != http.StatusForbidden {
			t.Errorf("%s lists every referral: %d %s", name, r.status, r.body)
		}
	}
}
