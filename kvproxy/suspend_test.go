package kvproxy_test

import (
	"strings"
	"testing"

	"github.com/theappliance/appliance/api"
)

// TestSuspendedOrganizationKVRefused: an operator's suspension refuses the organization's key-value store
// at once through both fronts with the reason (a RESP client's AUTH gets the error reply, the REST front a
// 403), and its stop job closes the connections already open; the data stays, and after the resume both
// fronts answer again with it.
func TestSuspendedOrganizationKVRefused(t *testing.T) {
	t.Parallel()
	k := newKVEnv(t)
	ctx := t.Context()
	prjID := k.project(t, "held")
	kv := k.store(t, prjID)
	token := *kv.Token
	open := k.client(t, token, 2)
	if err := open.Set(ctx, "k", "through the suspension", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if code, v := k.call(t, token, "GET", "/get/k", nil); code != 200 || v.(map[string]any)["result"] != "through the suspension" {
		t.Fatalf("REST before the suspension: %d %v", code, v)
	}

	added, err := k.Svc.Tenancy().AddOperator(ctx, &api.AddOperatorRequest{Email: "kv-ops@example.com"})
	if err != nil {
		t.Fatal(err)
	}
	sess, err := k.Svc.Identity().CreateSession(ctx, &api.SessionRequest{Email: "kv-ops@example.com", Password: added.Password})
	if err != nil {
		t.Fatal(err)
	}
	op, err := k.Svc.Identity().Authenticate(ctx, sess.Token)
	if err != nil {
		t.Fatal(err)
	}
	res, err := k.Svc.Tenancy().SuspendOrganization(ctx, op, k.p.OrganizationID, &api.SuspendOrganizationRequest{Reason: "unpaid invoice"})
	if err != nil {
		t.Fatal(err)
	}
	// At once, before the stop job: new clients are refused with the reason.
	err = k.client(t, token, 2).Ping(ctx).Err()
	if err == nil || !strings.Contains(err.Error(), "organization suspended: unpaid invoice") {
		t.Fatalf("a RESP client of a suspended organization: %v", err)
	}
	if code, v := k.call(t, token, "GET", "/get/k", nil); code != 403 || !strings.Contains(v.(map[string]any)["error"].(string), "organization suspended: unpaid invoice") {
		t.Fatalf("REST of a suspended organization: %d %v", code, v)
	}
	for _, j := range res.Jobs {
		k.wait(t, j.ID)
	}
	// The stop job closed the connection that was open (go-redis reconnects: to the refusal).
	if err := open.Get(ctx, "k").Err(); err == nil {
		t.Fatal("a connection opened before the suspension still answers after its stop job")
	}

	res, err = k.Svc.Tenancy().ResumeOrganization(ctx, op, k.p.OrganizationID)
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range res.Jobs {
		k.wait(t, j.ID)
	}
	if v, err := k.client(t, token, 3).Get(ctx, "k").Result(); err != nil || v != "through the suspension" {
		t.Fatalf("RESP after the resume: %q %v", v, err)
	}
	if v, err := open.Get(ctx, "k").Result(); err != nil || v != "through the suspension" {
		t.Fatalf("the first client, reconnected after the resume: %q %v", v, err)
	}
	if code, v := k.call(t, token, "GET", "/get/k", nil); code != 200 || v.(map[string]any)["result"] != "through the suspension" {
		t.Fatalf("REST after the resume: %d %v", code, v)
	}
}
