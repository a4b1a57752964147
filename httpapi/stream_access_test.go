package httpapi

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/theappliance/appliance/store"
)

// streamEndBound is how long a test waits for a stream to end once its credential lost access (the
// streams re-check every streamAuthCheck; the rest is slack for a loaded machine).
const streamEndBound = 5 * time.Second

// TestStreamsEndWhenAccessEnds: every stream (a project's events, the organization's events, a project's
// log tail), open over HTTP/1.1 and over HTTP/2, ends soon after its credential loses access — its key
// revoked, its user removed from the organization (their session and a key they made), its user's role
// changed, its session signed out, its session or key expired — and sends nothing emitted after that.
func TestStreamsEndWhenAccessEnds(t *testing.T) {
	t.Parallel()
	for _, proto := range []struct {
		name  string
		http2 bool
	}{{"HTTP/1.1", false}, {"HTTP/2", true}} {
		t.Run(proto.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, setupOpts{instances: true, http2: proto.http2,
				limits: RateLimits{PerSecond: 1e6, Burst: 1e6, StrictPerSecond: 1e6, StrictBurst: 1e6}})
			var mu sync.Mutex
			var ahead time.Duration // the service's clock runs this far ahead of the real one
			b.env.Clock.Set(func() time.Time { mu.Lock(); defer mu.Unlock(); return time.Now().Add(ahead) })
			prj := b.provision("watched", "development")
			org := "/v1/organizations/" + b.org.ID
			ok := func(r *response, what string) *response {
				t.Helper()
				if r.status >= 300 {
					t.Fatalf("%s: %d %s", what, r.status, r.body)
				}
				return r
			}
			userOf := func(session string) string {
				t.Helper()
				return ok(b.do("GET", "/v1/me", session, nil), "me").json["principal"].(map[string]any)["user_id"].(string)
			}
			newKey := func(creator string, body map[string]any) (plain, id string) {
				t.Helper()
				body["name"] = "streaming"
				body["scopes"] = []string{"projects:read", "organizations:read"}
				r := ok(b.do("POST", org+"/api-keys", creator, body), "create key")
				return r.json["plaintext_api_key"].(string), r.json["api_key"].(map[string]any)["id"].(string)
			}
			emit := func(marker string) {
				t.Helper()
				if err := b.db.Update(func(tx *store.Tx) error {
					return store.AppendEvent(tx, &store.Event{Type: "job.completed", OrganizationID: b.org.ID, ProjectID: prj.ID,
						Data: []byte(fmt.Sprintf(`{"marker":%q}`, marker)), CreatedAt: time.Now()})
				}); err != nil {
					t.Fatal(err)
				}
				ok(b.do("POST", "/v1/projects/"+prj.ID+"/sql", b.adminKey, map[string]any{"query": "DO $$ BEGIN RAISE LOG '" + marker + "'; END $$"}), "log")
			}
			var keyID, userID, session, changer string
			cases := []accessCase{
				{"key revoked", func() []string {
					var key string
					key, keyID = newKey(b.adminKey, map[string]any{})
					for range 3 { // the key's principal is cached: the cache must not keep it alive
						ok(b.do("GET", "/v1/me", key, nil), "me")
					}
					return []string{key}
				}, func() { ok(b.do("DELETE", org+"/api-keys/"+keyID, b.adminKey, nil), "revoke") }},
				{"member removed", func() []string {
					admin := b.session("admin")
					userID = userOf(admin)
					key, _ := newKey(admin, map[string]any{})
					return []string{admin, key}
				}, func() { ok(b.do("DELETE", org+"/members/"+userID, b.adminKey, nil), "remove member") }},
				{"role changed", func() []string {
					admin := b.session("admin")
					userID = userOf(admin)
					return []string{admin}
				}, func() {
					ok(b.do("PATCH", org+"/members/"+userID, b.adminKey, map[string]any{"role": "member"}), "demote")
				}},
				{"signed out", func() []string {
					session = b.session("member")
					return []string{session}
				}, func() { ok(b.do("DELETE", "/v1/auth/sessions/current", session, nil), "sign out") }},
				{"password changed elsewhere", func() []string {
					email, password := b.user("member")
					signIn := func() string {
						return ok(b.do("POST", "/v1/auth/sessions", "", map[string]any{"email": email, "password": password}), "sign in").json["token"].(string)
					}
					session, changer = signIn(), signIn() // changer changes the password: session ends
					return []string{session}
				}, func() {
					ok(b.do("POST", "/v1/auth/password", changer, map[string]any{"current_password": "correct horse battery staple", "new_password": "another correct horse battery"}), "change password")
				}},
				{"session and key expired", func() []string {
					key, _ := newKey(b.adminKey, map[string]any{"expires_in_days": 1})
					return []string{b.session("member"), key}
				}, func() { mu.Lock(); ahead = 25 * time.Hour; mu.Unlock() }}, // last: every session ends with it
			}
			for i, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					type open struct {
						name string
						c    <-chan sseEvent
					}
					var streams []open
					for j, cred := range c.give() {
						for _, path := range []string{"/v1/projects/" + prj.ID + "/events?skip_backlog=true",
							org + "/events?skip_backlog=true", "/v1/projects/" + prj.ID + "/logs/stream?severity=log"} {
							s, res := openStreamAt(t, b, path, cred, "")
							if res.StatusCode != http.StatusOK || (proto.http2 && res.ProtoMajor != 2) {
								t.Fatalf("%s: %d %s", path, res.StatusCode, res.Proto)
							}
							streams = append(streams, open{fmt.Sprintf("credential %d: %s", j, path), s})
						}
					}
					before, after := fmt.Sprintf("live-%d-before", i), fmt.Sprintf("live-%d-after", i)
					emit(before)
					for _, s := range streams {
						for e := next(t, s.c, true); !strings.Contains(e.data, before); e = next(t, s.c, true) {
						}
					}
					c.take()
					emit(after)
					for _, s := range streams {
						timeout := time.After(streamEndBound)
					read:
						for {
							select {
							case e, open := <-s.c:
								if !open {
									break read
								}
								if strings.Contains(e.data, after) {
									t.Errorf("%s: sent what was emitted after access ended: %+v", s.name, e)
								}
							case <-timeout:
								t.Errorf("%s: still open %s after access ended", s.name, streamEndBound)
								break read
							}
						}
					}
				})
			}
			// A demoted member is still a member: a new stream opens with the rights they have now.
			if r := b.do("GET", "/v1/projects/"+prj.ID+"/events?follow=false", b.session("member"), nil); r.status != http.StatusOK {
				t.Fatalf("a member's stream: %d %s", r.status, r.body)
			}
		})
	}
}

// accessCase is a way a credential loses access: give returns the credentials to stream with, take takes
// their access away.
type accessCase struct {
	name string
	give func() []string
	take func()
}

// TestQuietStreamStaysOpenOverHTTP2: over HTTP/2 (as browsers use it) a stream that has nothing to send
// for longer than the write budget stays open: the budget bounds each write, not the quiet between them.
func TestQuietStreamStaysOpenOverHTTP2(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{http2: true, limits: RateLimits{PerSecond: 1e6, Burst: 1e6, StrictPerSecond: 1e6, StrictBurst: 1e6}})
	b.api.writeBudget = 200 * time.Millisecond
	b.api.heartbeat = time.Second // each heartbeat follows a second of quiet: five write budgets
	prj := b.project("quiet", "development")
	s, res := openStreamAt(t, b, "/v1/projects/"+prj.ID+"/events?skip_backlog=true", b.adminKey, "")
	if res.StatusCode != http.StatusOK || res.ProtoMajor != 2 {
		t.Fatalf("%d %s", res.StatusCode, res.Proto)
	}
	for range 2 {
		if e := next(t, s, false); e.typ != "heartbeat" {
			t.Fatalf("while quiet: %+v", e)
		}
	}
	if err := b.db.Update(func(tx *store.Tx) error {
		return store.AppendEvent(tx, &store.Event{Type: "job.completed", OrganizationID: b.org.ID, ProjectID: prj.ID,
			Data: []byte(`{"after":"quiet"}`), CreatedAt: time.Now()})
	}); err != nil {
		t.Fatal(err)
	}
	if e := next(t, s, true); e.typ != "job.completed" || e.data != `{"after":"quiet"}` {
		t.Fatalf("after the quiet: %+v", e)
	}
}
