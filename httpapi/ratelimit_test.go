package httpapi

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"
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

// TestSignInBackoffPerAccount: failed sign-ins are counted per account (the email, known or not), not
// only per address: after 5 failures the account answers 429 for a doubling wait (1 s, 2 s, … up to 15
// minutes), the right password included; a success clears the count; other accounts are untouched.
// Before, an attacker with many addresses could guess one account's password without end.
func TestSignInBackoffPerAccount(t *testing.T) {
	t.Parallel()
	b := setup(t)
	email, password := b.user("member")
	other, otherPassword := b.user("member")
	var shift time.Duration
	later := func(d time.Duration) func(*testing.T, vars) {
		return func(*testing.T, vars) { shift += d; moveClock(b, shift) }
	}
	v := vars{"email": email, "password": password, "other": other, "otherPassword": otherPassword}
	wrong := map[string]any{"email": "$email", "password": "not the password"}
	right := map[string]any{"email": "$email", "password": "$password"}
	locked := func(max int) func(t *testing.T, v vars, r *response) {
		return func(t *testing.T, v vars, r *response) { check429(t, r, max) }
	}
	table := []scenario{}
	for i := 1; i <= 5; i++ {
		table = append(table, scenario{name: "failure " + strconv.Itoa(i), method: "POST", path: "/v1/auth/sessions", body: wrong, status: 401})
	}
	table = append(table,
		scenario{name: "the right password while backing off", method: "POST", path: "/v1/auth/sessions", body: right, status: 429, check: locked(1),
			want: map[string]any{"error": "too many failed sign-ins for this account: retry after the number of seconds in Retry-After"}},
		scenario{name: "another account", method: "POST", path: "/v1/auth/sessions", body: map[string]any{"email": "$other", "password": "$otherPassword"}, status: 201},
		scenario{name: "a sixth failure after the wait", before: later(time.Second), method: "POST", path: "/v1/auth/sessions", body: wrong, status: 401},
		scenario{name: "the wait doubled", method: "POST", path: "/v1/auth/sessions", body: right, status: 429, check: locked(2)},
		scenario{name: "still backing off after 1 s", before: later(time.Second), method: "POST", path: "/v1/auth/sessions", body: right, status: 429, check: locked(1)},
		scenario{name: "the right password after the wait", before: later(time.Second), method: "POST", path: "/v1/auth/sessions", body: right, status: 201},
		scenario{name: "a failure after a success starts over", method: "POST", path: "/v1/auth/sessions", body: wrong, status: 401},
		scenario{name: "and does not lock", method: "POST", path: "/v1/auth/sessions", body: right, status: 201},
	)
	for i := 1; i <= 5; i++ {
		table = append(table, scenario{name: "unknown account failure " + strconv.Itoa(i), method: "POST", path: "/v1/auth/sessions",
			body: map[string]any{"email": "Nobody@Example.com", "password": "guess"}, status: 401})
	}
	table = append(table, scenario{name: "an unknown account backs off alike", method: "POST", path: "/v1/auth/sessions",
		body: map[string]any{"email": " nobody@example.com", "password": "guess"}, status: 429, check: locked(1)})
	run(t, b, v, table)
}

// TestRateLimitIPv6Prefix: the per-address buckets count an IPv6 client by its /64, the block one host
// usually holds (so it cannot take a fresh bucket per address); IPv4 addresses stay one each.
func TestRateLimitIPv6Prefix(t *testing.T) {
	t.Parallel()
	b := setup(t, tinyLimits)
	hit := func(addr string) int {
		req := httptest.NewRequest("POST", "/v1/cli/login/sessions", nil)
		req.RemoteAddr = addr
		rec := httptest.NewRecorder()
		b.api.ServeHTTP(rec, req)
		return rec.Code
	}
	for _, c := range []struct {
		addr string
		want int
	}{
		{"[2001:db8:1:2::1]:4000", 201},
		{"[2001:db8:1:2::ffff]:4001", 429},      // the same /64
		{"[2001:db8:1:2:abcd:1:2:3]:4002", 429}, // the same /64
		{"[2001:db8:1:3::1]:4003", 201},         // the next /64
		{"192.0.2.10:4004", 201},                // IPv4: per address
		{"192.0.2.11:4005", 201},                //
		{"[::ffff:192.0.2.10]:4006", 429},       // the same IPv4 address, mapped
	} {
		if got := hit(c.addr); got != c.want {
			t.Errorf("%s: %d, want %d", c.addr, got, c.want)
		}
	}
}
