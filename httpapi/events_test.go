package httpapi

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/store"
)

// sseEvent is one event read off a stream.
type sseEvent struct{ id, typ, data string }

// openStream connects to a project's event stream and returns a channel of its events (and of a
// heartbeat as typ "heartbeat"); it is closed when the stream ends.
func openStream(t *testing.T, b *bundle, projectID, cred, lastID string) (<-chan sseEvent, *http.Response) {
	t.Helper()
	return openStreamAt(t, b, "/v1/projects/"+projectID+"/events", cred, lastID)
}

// openStreamAt is openStream on any stream path (with its query).
func openStreamAt(t *testing.T, b *bundle, path, cred, lastID string) (<-chan sseEvent, *http.Response) {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), "GET", b.ts.URL+path, nil)
	req.Header.Set("Authorization", "Bearer "+cred)
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	res, err := b.ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	out := make(chan sseEvent, 100)
	go func() {
		defer close(out)
		defer res.Body.Close()
		sc := bufio.NewScanner(res.Body)
		var cur sseEvent
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == ": heartbeat":
				out <- sseEvent{typ: "heartbeat"}
			case strings.HasPrefix(line, "id: "):
				cur.id = line[4:]
			case strings.HasPrefix(line, "event: "):
				cur.typ = line[7:]
			case strings.HasPrefix(line, "data: "):
				cur.data = line[6:]
			case line == "" && cur.typ != "":
				out <- cur
				cur = sseEvent{}
			}
		}
	}()
	return out, res
}

func next(t *testing.T, c <-chan sseEvent, skipHeartbeats bool) sseEvent {
	t.Helper()
	for {
		select {
		case e, ok := <-c:
			if !ok {
				t.Fatal("the stream ended")
			}
			if skipHeartbeats && e.typ == "heartbeat" {
				continue
			}
			return e
		case <-time.After(60 * time.Second):
			t.Fatal("no event")
		}
	}
}

// TestProjectEventStream: the stream gives the events the log holds after the client's position, then live
// ones, with heartbeats; a reconnect with Last-Event-ID misses nothing and repeats nothing; a key of
// another project is refused; Close ends streams.
func TestProjectEventStream(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{instances: true, limits: RateLimits{PerSecond: 1e6, Burst: 1e6, StrictPerSecond: 1e6, StrictBurst: 1e6}})
	b.api.heartbeat = 200 * time.Millisecond
	prj := b.provision("streamed", "development")
	s, res := openStream(t, b, prj.ID, b.adminKey, "")
	if res.StatusCode != http.StatusOK || res.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("%d %v", res.StatusCode, res.Header)
	}
	first, second := next(t, s, true), next(t, s, true)
	if first.typ != "job.completed" || second.typ != "project.ready" || !strings.Contains(second.data, `"type":"project.provision"`) {
		t.Fatalf("the log's events: %+v %+v", first, second)
	}
	if e := next(t, s, false); e.typ != "heartbeat" {
		t.Fatalf("no heartbeat while idle: %+v", e)
	}
	// Live: a backup's end arrives as it happens.
	r := b.do("POST", "/v1/projects/"+prj.ID+"/backups", b.adminKey, map[string]any{})
	if r.status != http.StatusAccepted {
		t.Fatalf("backup: %d %s", r.status, r.body)
	}
	live1, live2 := next(t, s, true), next(t, s, true)
	if live1.typ != "job.completed" || live2.typ != "backup.completed" {
		t.Fatalf("live events: %+v %+v", live1, live2)
	}
	// A reconnect after the second event gets the rest, once each.
	again, _ := openStream(t, b, prj.ID, b.adminKey, second.id)
	if e := next(t, again, true); e.id != live1.id || e.typ != "job.completed" {
		t.Fatalf("resumed at %+v, want %s", e, live1.id)
	}
	if e := next(t, again, true); e.id != live2.id {
		t.Fatalf("then %+v", e)
	}
	// Another project's key is refused before any stream.
	other := b.project("other", "development")
	otherKey := b.key(other.ID, api.ScopeProjectsRead)
	req, _ := http.NewRequest("GET", b.ts.URL+"/v1/projects/"+prj.ID+"/events", nil)
	req.Header.Set("Authorization", "Bearer "+otherKey)
	if res, err := b.ts.Client().Do(req); err != nil || res.StatusCode != http.StatusForbidden {
		t.Fatalf("another project's key: %v %v", res.StatusCode, err)
	}
	// follow=false: the backlog, then the end.
	r = b.do("GET", "/v1/projects/"+prj.ID+"/events?follow=false", b.adminKey, nil)
	if r.status != http.StatusOK || strings.Count(string(r.body), "\nevent: ") != 4 {
		t.Fatalf("follow=false: %d %s", r.status, r.body)
	}
	// Shutdown ends the streams.
	b.api.Close()
	for range s {
	}
}

// TestStalledStreamDoesNotBlock: a client that opens a stream and never reads, while far more events
// than its socket buffers hold are appended, holds nothing but its own connection: the API answers and
// events keep being appended (the write budget then ends its stream).
func TestStalledStreamDoesNotBlock(t *testing.T) {
	t.Parallel()
	b := setup(t)
	prj := b.project("stalled", "development")
	conn, err := net.Dial("tcp", strings.TrimPrefix(b.ts.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "GET /v1/projects/%s/events HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n\r\n", prj.ID, b.adminKey)
	big := strings.Repeat("x", 4000)
	for i := range 2000 { // ~8 MB of events: more than any socket buffer
		if err := b.db.Update(func(tx *store.Tx) error {
			return store.AppendEvent(tx, &store.Event{Type: "job.completed", OrganizationID: b.org.ID, ProjectID: prj.ID,
				Data: []byte(fmt.Sprintf(`{"n":%d,"pad":%q}`, i, big)), CreatedAt: time.Now()})
		}); err != nil {
			t.Fatal(err)
		}
		if i%200 == 0 {
			if r := b.do("GET", "/v1/me", b.adminKey, nil); r.status != http.StatusOK {
				t.Fatalf("/v1/me with a stalled stream open: %d %s", r.status, r.body)
			}
		}
	}
	for range 20 {
		if r := b.do("GET", "/v1/me", b.adminKey, nil); r.status != http.StatusOK {
			t.Fatalf("/v1/me with a stalled stream open: %d %s", r.status, r.body)
		}
	}
}

// TestOrganizationEventStream: the organization's stream carries every project's events; the
// organization's own events only to callers holding organizations:read (a caller without it still gets
// the project events behind a long run of them); project-scoped keys are refused.
func TestOrganizationEventStream(t *testing.T) {
	t.Parallel()
	b := setup(t)
	one, two := b.project("one", "development"), b.project("two", "development")
	appendEv := func(projectID, typ string) {
		if err := b.db.Update(func(tx *store.Tx) error {
			return store.AppendEvent(tx, &store.Event{Type: typ, OrganizationID: b.org.ID, ProjectID: projectID, Data: []byte(`{}`), CreatedAt: time.Now()})
		}); err != nil {
			t.Fatal(err)
		}
	}
	appendEv(one.ID, "job.completed")
	for range 250 {
		appendEv("", "webhook_endpoint.disabled")
	}
	appendEv(two.ID, "project.ready")
	path := "/v1/organizations/" + b.org.ID + "/events?follow=false"
	all := b.do("GET", path, b.adminKey, nil)
	if all.status != 200 || strings.Count(string(all.body), "event: webhook_endpoint.disabled") != 250 || !strings.Contains(string(all.body), "event: project.ready") {
		t.Fatalf("admin: %d, %d bytes", all.status, len(all.body))
	}
	reader := b.key("", api.ScopeProjectsRead)
	r := b.do("GET", path, reader, nil)
	if r.status != 200 || strings.Contains(string(r.body), "webhook_endpoint.disabled") ||
		!strings.Contains(string(r.body), "event: job.completed") || !strings.Contains(string(r.body), "event: project.ready") {
		t.Fatalf("projects:read only: %d %s", r.status, r.body)
	}
	if r := b.do("GET", path, b.key(one.ID, api.ScopeProjectsRead), nil); r.status != http.StatusForbidden {
		t.Fatalf("a project-scoped key: %d %s", r.status, r.body)
	}
	// skip_backlog: nothing of the log, only what comes next.
	if r := b.do("GET", path+"&skip_backlog=true", b.adminKey, nil); r.status != 200 || strings.Contains(string(r.body), "event: ") {
		t.Fatalf("skip_backlog: %d %s", r.status, r.body)
	}
	live, _ := openStreamAt(t, b, "/v1/organizations/"+b.org.ID+"/events?skip_backlog=true", b.adminKey, "")
	appendEv(two.ID, "backup.completed")
	if e := next(t, live, true); e.typ != "backup.completed" {
		t.Fatalf("the first event after skip_backlog: %+v", e)
	}
	b.api.Close()
}
