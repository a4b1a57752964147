package forward_test

import (
	"bufio"
	"crypto/tls"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/theappliance/appliance/appliance/certs"
	"github.com/theappliance/appliance/appliance/cluster/forward"
	"github.com/theappliance/appliance/store"
)

type env struct {
	db      *store.DB
	fwd     *forward.Forwarder
	front   *httptest.Server // node A's API: forwards what is not its own
	release chan struct{}    // lets node B's stream send its second event
}

// setup: node A (this one) and node B, each with a node certificate of one CA; node B's peer listener
// requires and verifies a client's node certificate (as the join listener's peer channel does) and echoes
// what it received; projects on A, on B, on the node that formed the cluster (A) and on a node that is
// gone (its address refuses connections).
func setup(t *testing.T) *env {
	t.Helper()
	ca, err := certs.LoadOrCreateCA(filepath.Join(t.TempDir(), "ca"))
	if err != nil {
		t.Fatal(err)
	}
	pair := func() tls.Certificate {
		c, k, err := ca.IssuePeer("127.0.0.1")
		if err != nil {
			t.Fatal(err)
		}
		p, err := tls.X509KeyPair(c, k)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	e := &env{release: make(chan struct{})}
	b := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/stream") {
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, "event: log\ndata: one\n\n")
			w.(http.Flusher).Flush()
			<-e.release
			io.WriteString(w, "event: log\ndata: two\n\n")
			return
		}
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(http.StatusTeapot)
		json.NewEncoder(w).Encode(map[string]string{"path": r.URL.RequestURI(), "body": string(body), "by": r.Header.Get(forward.Header),
			"client": r.Header.Get(forward.ClientIPHeader), "auth": r.Header.Get("Authorization"), "host": r.Host,
			"peer_cn": r.TLS.PeerCertificates[0].Subject.CommonName})
	}))
	b.TLS = &tls.Config{Certificates: []tls.Certificate{pair()}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: ca.Pool()}
	b.StartTLS()
	t.Cleanup(b.Close)
	gone, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	goneURL := "https://" + gone.Addr().String()
	gone.Close()

	if e.db, err = store.Open(filepath.Join(t.TempDir(), "meta.db")); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.db.Close() })
	if err := e.db.Update(func(tx *store.Tx) error {
		for _, n := range []*store.Node{{ID: "nod_a", JoinURL: "https://127.0.0.1:1"}, {ID: "nod_b", JoinURL: b.URL}, {ID: "nod_gone", JoinURL: goneURL}} {
			if err := store.Nodes.Put(tx, n); err != nil {
				return err
			}
		}
		for id, node := range map[string]string{"prj_a": "nod_a", "prj_b": "nod_b", "prj_formed": "", "prj_gone": "nod_gone"} {
			if err := store.Projects.Put(tx, &store.Project{ID: id, NodeID: node}); err != nil {
				return err
			}
		}
		if err := store.Uploads.Put(tx, &store.Upload{ID: "upl_b", ProjectID: "prj_b"}); err != nil {
			return err
		}
		if err := store.Exports.Put(tx, &store.Export{ID: "exp_b", ProjectID: "prj_b"}); err != nil {
			return err
		}
		if err := store.Uploads.Put(tx, &store.Upload{ID: "upl_a", ProjectID: "prj_a"}); err != nil {
			return err
		}
		return tx.SetMeta(store.MetaFormedBy, "nod_a")
	}); err != nil {
		t.Fatal(err)
	}
	e.fwd = forward.New("nod_a", e.db, &tls.Config{Certificates: []tls.Certificate{pair()}, RootCAs: ca.Pool()}, nil)
	e.front = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		node, local, err := e.fwd.Owner(r.PathValue("p"))
		if err != nil {
			t.Errorf("owner: %v", err)
		}
		if local {
			io.WriteString(w, "local")
			return
		}
		w.Header().Set("Cache-Control", "no-store") // as the API sets on every answer
		e.fwd.Forward(w, r, node)
	}))
	mux := http.NewServeMux()
	front := e.front.Config.Handler
	mux.Handle("/p/{p}/", front)
	e.front.Config.Handler = mux
	t.Cleanup(e.front.Close)
	return e
}

func TestOwner(t *testing.T) {
	e := setup(t)
	for p, want := range map[string]string{"prj_a": "", "prj_formed": "", "prj_unknown": "", "prj_b": "nod_b", "prj_gone": "nod_gone"} {
		node, local, err := e.fwd.Owner(p)
		if err != nil {
			t.Fatal(err)
		}
		if got := ""; !local {
			got = node.ID
			if got != want {
				t.Errorf("%s: owner %s, want %s", p, got, want)
			}
		} else if want != "" {
			t.Errorf("%s: local, want node %s", p, want)
		}
	}
}

// TestOwnerOf: a signed URL's upload or export runs on its project's node; one unknown here on this node.
func TestOwnerOf(t *testing.T) {
	e := setup(t)
	for _, c := range []struct{ param, id, want string }{
		{"uploadID", "upl_b", "nod_b"}, {"exportID", "exp_b", "nod_b"}, {"uploadID", "upl_a", ""}, {"uploadID", "upl_unknown", ""}, {"exportID", "upl_b", ""},
	} {
		node, local, err := e.fwd.OwnerFor(c.param, func(p string) string {
			if p != c.param {
				t.Errorf("asked for %s, want %s", p, c.param)
			}
			return c.id
		})
		if err != nil {
			t.Fatal(err)
		}
		if got := ""; !local {
			got = node.ID
			if got != c.want {
				t.Errorf("%s %s: owner %s, want %s", c.param, c.id, got, c.want)
			}
		} else if c.want != "" {
			t.Errorf("%s %s: local, want node %s", c.param, c.id, c.want)
		}
	}
	if _, _, err := e.fwd.OwnerOf("keyID", "k"); err == nil {
		t.Fatal("an owner of an unknown kind of record")
	}
}

// TestForward: a request to another node's project reaches it over mutual TLS with its method, path,
// query, body and credentials, marked as forwarded by this node with the caller's address and Host; the
// answer's status, headers and body come back as they are.
func TestForward(t *testing.T) {
	e := setup(t)
	req, _ := http.NewRequest(http.MethodPost, e.front.URL+"/p/prj_b/sql?x=1", strings.NewReader(`{"query":"select 1"}`))
	req.Header.Set("Authorization", "Bearer k_caller")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var got map[string]string
	json.NewDecoder(resp.Body).Decode(&got)
	host := strings.TrimPrefix(e.front.URL, "http://")
	want := map[string]string{"path": "/p/prj_b/sql?x=1", "body": `{"query":"select 1"}`, "by": "nod_a", "client": "127.0.0.1",
		"auth": "Bearer k_caller", "host": host, "peer_cn": "127.0.0.1"}
	if resp.StatusCode != http.StatusTeapot || resp.Header.Get("Content-Type") != "application/json" || len(resp.Header.Values("Cache-Control")) != 1 {
		t.Fatalf("status %d %s, Cache-Control %q (once: the owning node's replaces this one's)", resp.StatusCode, resp.Header.Get("Content-Type"), resp.Header.Values("Cache-Control"))
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %q, want %q", k, got[k], v)
		}
	}
	// This node's own project is served here.
	resp2, err := http.Get(e.front.URL + "/p/prj_a/sql")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp2.Body)
	resp2.Body.Close()
	if string(b) != "local" {
		t.Fatalf("this node's project: %q", b)
	}
}

// TestForwardStreams: an event stream flows through as the owning node writes it (its first event
// arrives while the second is not written yet).
func TestForwardStreams(t *testing.T) {
	e := setup(t)
	resp, err := http.Get(e.front.URL + "/p/prj_b/stream")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	first := make(chan string, 1)
	rd := bufio.NewReader(resp.Body)
	go func() {
		line, _ := rd.ReadString('\n')
		line2, _ := rd.ReadString('\n')
		first <- line + line2
	}()
	select {
	case got := <-first:
		if got != "event: log\ndata: one\n" {
			t.Fatalf("first event: %q", got)
		}
	case <-time.After(time.Minute): // not a timing assertion: the event is held back until release
		t.Fatal("the stream's first event did not come through before the stream ended (the forwarder buffers)")
	}
	close(e.release)
	rest, _ := io.ReadAll(rd)
	if !strings.Contains(string(rest), "data: two") {
		t.Fatalf("the rest of the stream: %q", rest)
	}
}

// TestForwardNodeDown: a node that does not answer is a JSON 503 naming it, not its address.
func TestForwardNodeDown(t *testing.T) {
	e := setup(t)
	resp, err := http.Get(e.front.URL + "/p/prj_gone/logs")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var body struct{ Error, Node string }
	if err := json.Unmarshal(b, &body); err != nil || resp.StatusCode != http.StatusServiceUnavailable || body.Node != "nod_gone" ||
		!strings.Contains(body.Error, "nod_gone") || strings.Contains(string(b), "127.0.0.1") || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("%d %s (%v)", resp.StatusCode, b, err)
	}
}
