package httpapi

import (
	"net/http"
	"strconv"
	"testing"
)

var tinyLimits = setupOpts{limits: RateLimits{PerSecond: 1, Burst: 3, StrictPerSecond: 0.1, StrictBurst: 1}}

// check429 holds a refusal to the contract: 429, a JSON error and a Retry-After of whole seconds.
func check429(t *testing.T, r *response, maxWait int) {
	t.Helper()
	if r.status != http.StatusTooManyRequests {
		t.Fatalf("status %d, want 429\n%s", r.status, r.body)
	}
	checkErrorShape(t, r)
	n, err := strconv.Atoi(r.header.Get("Retry-After"))
	if err != nil || n < 1 || n > maxWait {
		t.Fatalf("Retry-After %q, want 1 to %d seconds", r.header.Get("Retry-After"), maxWait)
	}
}

// untilLimited calls until the general bucket refuses (it refills at one token a second, so a slow
// machine may need a few calls more than the burst); every earlier answer must be want.
func untilLimited(t *testing.T, b *bundle, method, path, cred string, want int) *response {
	t.Helper()
	for range 50 {
		r := b.call(t, method, path, bearer(cred), nil)
		if r.status == http.StatusTooManyRequests {
			return r
		}
		if r.status != want {
			t.Fatalf("%s %s: %d, want %d until limited\n%s", method, path, r.status, want, r.body)
		}
	}
	t.Fatalf("%s %s: never limited", method, path)
	return nil
}

func TestRateLimitGeneralBucket(t *testing.T) {
	t.Parallel()
	b := setup(t, tinyLimits)
	for i := range 3 { // the burst
		if r := b.do("GET", "/healthz", "", nil); r.status != http.StatusOK {
			t.Fatalf("call %d of the burst: %d %s", i+1, r.status, r.body)
		}
	}
	check429(t, untilLimited(t, b, "GET", "/healthz", "", http.StatusOK), 1)
	// The limit applies before authentication and to unknown routes as well.
	check429(t, untilLimited(t, b, "GET", "/v1/me", "", http.StatusUnauthorized), 1)
	check429(t, untilLimited(t, b, "GET", "/v1/me", b.adminKey, http.StatusOK), 1)
	check429(t, untilLimited(t, b, "GET", "/v1/nope", "", http.StatusNotFound), 1)
}

func TestRateLimitStrictBucket(t *testing.T) {
	t.Parallel()
	b := setup(t, tinyLimits)
	start := b.do("POST", "/v1/cli/login/sessions", "", nil)
	if start.status != http.StatusCreated {
		t.Fatalf("first start: %d %s", start.status, start.body)
	}
	// The strict bucket holds one token refilled every ten seconds: the next call of any strict route is
	// refused, however often it is tried, while the general bucket is not spent by those refusals.
	for range 5 {
		check429(t, b.do("POST", "/v1/cli/login/sessions", "", nil), 10)
	}
	check429(t, b.do("GET", "/v1/cli/login/sessions/"+start.json["session_id"].(string)+"?poll_token="+start.json["poll_token"].(string), "", nil), 10)
	check429(t, b.do("POST", "/v1/auth/sessions", "", map[string]any{"email": "a@example.com", "password": "0123456789abc"}), 10)
	for i := range 2 {
		if r := b.do("GET", "/v1/me", b.adminKey, nil); r.status != http.StatusOK {
			t.Fatalf("a normal endpoint after strict refusals (call %d): %d %s", i+1, r.status, r.body)
		}
	}
}

// TestRateLimitPerCredential: each API key has its own bucket beside the IP's, so one busy key is
// refused while another from the same IP is not; and by default a loopback client is held only by its
// credential's bucket, not the IP's (integration tests on the same machine).
func TestRateLimitPerCredential(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{limits: RateLimits{PerSecond: 1e6, Burst: 1e6, StrictPerSecond: 1e6, StrictBurst: 1e6,
		CredentialPerSecond: 1, CredentialBurst: 3}})
	other := b.key("", "projects:read")
	check429(t, untilLimited(t, b, "GET", "/v1/me", b.adminKey, http.StatusOK), 1)
	if r := b.do("GET", "/v1/me", other, nil); r.status != http.StatusOK {
		t.Fatalf("another key of the same IP is limited: %d", r.status)
	}

	loop := setup(t, setupOpts{limits: RateLimits{PerSecond: 1, Burst: 2, StrictPerSecond: 1e6, StrictBurst: 1e6,
		CredentialPerSecond: 1e6, CredentialBurst: 1e6, ExemptLoopback: true}})
	for i := range 50 {
		if r := loop.do("GET", "/v1/me", loop.adminKey, nil); r.status != http.StatusOK {
			t.Fatalf("call %d from loopback, exempt from the per-IP bucket: %d", i, r.status)
		}
	}
}

func TestParseRate(t *testing.T) {
	if r, n, err := ParseRate("100:400"); r != 100 || n != 400 || err != nil {
		t.Fatal(r, n, err)
	}
	for _, bad := range []string{"100", "0:1", "1:0", "x:1", "-1:5"} {
		if _, _, err := ParseRate(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
