package cluster

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/theappliance/appliance/appliance/certs"
	"github.com/theappliance/appliance/store"
	"github.com/theappliance/appliance/store/etcdembed"
)

// newSingleNode is a stopped single-node appliance's data directory: meta.db with an organization.
func newSingleNode(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	db, err := store.Open(filepath.Join(dir, "meta.db"))
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *store.Tx) error {
		return store.Organizations.Put(tx, &store.Organization{ID: "org_1", Name: "one", Slug: "one", CreatedAt: time.Now().UTC()})
	}); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	key := make([]byte, 32)
	rand.Read(key)
	if err := os.WriteFile(filepath.Join(dir, "secret.key"), key, 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

type node struct {
	dir   string
	m     *Member
	joins *JoinServer
	ca    *certs.CA
}

func startNode(t *testing.T, ctx context.Context, dir string) *node {
	t.Helper()
	m, err := StartMember(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := certs.LoadOrCreateCA(filepath.Join(dir, "ca"))
	if err != nil {
		t.Fatal(err)
	}
	js, err := m.ServeJoins(ca, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	n := &node{dir: dir, m: m, joins: js, ca: ca}
	t.Cleanup(func() { js.Close(context.Background()); m.Stop() })
	return n
}

func (n *node) token(t *testing.T, ttl time.Duration) string {
	t.Helper()
	tok, _, err := NewJoinToken(n.m.DB(), n.m.Config(), n.ca, ttl)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func nodeCount(t *testing.T, db *store.DB) int {
	t.Helper()
	var n int
	if err := db.View(func(tx *store.Tx) error {
		all, err := store.Nodes.All(tx, nil)
		n = len(all)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestFormAndJoin: init converts a single node (its organization now in etcd, meta.db kept aside), a
// second node joins with a token (over the first's join listener, on another loopback address) and reads
// the same metadata; the refusals change nothing: a token used again, an expired one, a forged secret, a
// token of another cluster (refused by the joining node's TLS check before the secret is sent), and a
// joining node whose clock is far off.
func TestFormAndJoin(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir1 := newSingleNode(t)
	cfg1, err := Init(ctx, InitOptions{DataDir: dir1, Advertise: "127.0.0.1"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !IsNode(dir1) || cfg1.NodeID == "" {
		t.Fatalf("init: not a node: %+v", cfg1)
	}
	if _, err := Init(ctx, InitOptions{DataDir: dir1, Advertise: "127.0.0.1"}, io.Discard); err == nil || !strings.Contains(err.Error(), "already a cluster node") {
		t.Fatalf("second init: %v", err)
	}
	n1 := startNode(t, ctx, dir1)
	var org *store.Organization
	n1.m.DB().View(func(tx *store.Tx) error { org, err = store.Organizations.Get(tx, "org_1"); return err })
	if err != nil || org.Name != "one" {
		t.Fatalf("the organization on etcd: %v %+v", err, org)
	}

	tok := n1.token(t, time.Hour)
	dir2 := t.TempDir()
	if _, err := Join(ctx, JoinOptions{DataDir: dir2, Token: tok, Advertise: "127.0.0.2"}); err != nil {
		t.Fatal(err)
	}
	// The recovery key init made (shown once) is the one node 2 was handed.
	key1, err1 := os.ReadFile(filepath.Join(dir1, RecoveryKeyFile))
	key2, err2 := os.ReadFile(filepath.Join(dir2, RecoveryKeyFile))
	if err1 != nil || err2 != nil || len(key1) != 65 || string(key1) != string(key2) {
		t.Fatalf("recovery keys: node 1 %v %d bytes, node 2 %v, equal %v", err1, len(key1), err2, string(key1) == string(key2))
	}
	n2 := startNode(t, ctx, dir2)
	if err := n2.m.Register(NodeInfo{APIURL: "https://127.0.0.2:1", Version: "test"}); err != nil {
		t.Fatal(err)
	}
	n2.m.DB().View(func(tx *store.Tx) error { org, err = store.Organizations.Get(tx, "org_1"); return err })
	if err != nil || org.Name != "one" {
		t.Fatalf("the organization through node 2: %v %+v", err, org)
	}
	st := n2.m.Status(ctx)
	if len(st.Members) != 2 || !st.Quorum || st.Leader == "" {
		t.Fatalf("status through node 2: %+v", st)
	}
	for _, mem := range st.Members {
		if mem.Learner {
			t.Fatalf("member %s is still a learner", mem.Name)
		}
	}

	foreignDir := newSingleNode(t)
	foreignCA, err := certs.LoadOrCreateCA(filepath.Join(foreignDir, "ca"))
	if err != nil {
		t.Fatal(err)
	}
	good := n1.token(t, time.Hour)
	gt, _ := parseToken(good)
	forged := gt
	forged.Secret = "not-the-secret"
	foreign := gt
	foreign.Fingerprint = foreignCA.Fingerprint()
	expired := n1.token(t, time.Millisecond)
	time.Sleep(5 * time.Millisecond) // the token's expiry is a time, not an event to wait on
	for _, c := range []struct {
		name, token, want string
		skew              time.Duration
	}{
		{"reused", tok, "used already", 0},
		{"expired", expired, "expired", 0},
		{"forged", forged.String(), "unknown to this cluster", 0},
		{"foreign", foreign.String(), "not of the cluster the join token names", 0},
		{"clock", good, "clock is", 2 * time.Minute},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := nodeCount(t, n1.m.DB())
			dir := t.TempDir()
			_, err := Join(ctx, JoinOptions{DataDir: dir, Token: c.token, Advertise: "127.0.0.3", clockSkew: c.skew})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("join: %v, want an error with %q", err, c.want)
			}
			if IsNode(dir) {
				t.Fatal("a refused join left cluster.json")
			}
			if after := nodeCount(t, n1.m.DB()); after != before {
				t.Fatalf("nodes: %d after a refused join, %d before", after, before)
			}
			if st := n1.m.Status(ctx); len(st.Members) != 2 {
				t.Fatalf("members after a refused join: %+v", st.Members)
			}
		})
	}
	// The good token, refused for the clock only, still joins.
	dir3 := t.TempDir()
	if _, err := Join(ctx, JoinOptions{DataDir: dir3, Token: good, Advertise: "127.0.0.3"}); err != nil {
		t.Fatalf("the token refused for the clock: %v", err)
	}
	n3 := startNode(t, ctx, dir3)
	if st := n3.m.Status(ctx); len(st.Members) != 3 || !st.Quorum {
		t.Fatalf("status through node 3: %+v", st)
	}

	// remove-node: refused while the node hosts projects (listed), then done: member and record gone.
	id3 := n3.m.Config().NodeID
	if err := n1.m.DB().Update(func(tx *store.Tx) error {
		return store.Projects.Put(tx, &store.Project{ID: "prj_on3", OrganizationID: "org_1", Name: "p", NodeID: id3})
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := RemoveNode(ctx, n1.m.Client(), n1.m.DB(), n1.m.Config().NodeID, id3); !errors.Is(err, ErrNodeHasProjects) || !strings.Contains(err.Error(), "prj_on3") {
		t.Fatalf("remove a node hosting a project: %v", err)
	}
	if _, err := RemoveNode(ctx, n1.m.Client(), n1.m.DB(), n1.m.Config().NodeID, n1.m.Config().NodeID); err == nil || !strings.Contains(err.Error(), "this one") {
		t.Fatalf("remove the node itself: %v", err)
	}
	list, err := ListNodes(n1.m.DB())
	if err != nil || len(list) != 3 {
		t.Fatalf("nodes: %v %+v", err, list)
	}
	for _, n := range list {
		want := 0
		switch n.ID {
		case cfg1.NodeID:
			want = 0 // the formed-by node hosts projects with no node: there are none
		case id3:
			want = 1
		}
		if len(n.Projects) != want {
			t.Errorf("node %s hosts %v, want %d", n.ID, n.Projects, want)
		}
	}
	if err := n1.m.DB().Update(func(tx *store.Tx) error { return store.Projects.Delete(tx, "prj_on3") }); err != nil {
		t.Fatal(err)
	}
	// Node 3's certificate on the nodes' channel (node 1's join listener): a node's, so let through to the
	// API (not serving here: 503) while it is a node; refused (403) once it is removed.
	peerGet := func() (int, string) {
		t.Helper()
		tc, err := PeerClientTLS(dir3)
		if err != nil {
			t.Fatal(err)
		}
		cl := &http.Client{Transport: &http.Transport{TLSClientConfig: tc}, Timeout: 30 * time.Second}
		res, err := cl.Get(n1.m.Config().JoinURL() + "/v1/projects")
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	if code, body := peerGet(); code != http.StatusServiceUnavailable {
		t.Fatalf("node 3's certificate on the nodes' channel before its removal: %d %s", code, body)
	}
	// And at etcd itself: node 3's certificate as a client of node 1's member (its CRL file).
	etcdGet := func() error {
		t.Helper()
		tc, err := clientTLS(dir3)
		if err != nil {
			t.Fatal(err)
		}
		c, err := etcdembed.NewClient([]string{n1.m.Config().ClientURL()}, tc)
		if err != nil {
			return err
		}
		defer c.Close()
		gctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		_, err = c.Get(gctx, Prefix+"probe")
		return err
	}
	if err := etcdGet(); err != nil {
		t.Fatalf("node 3's certificate at node 1's etcd member before its removal: %v", err)
	}
	if _, err := RemoveNode(ctx, n1.m.Client(), n1.m.DB(), n1.m.Config().NodeID, id3); err != nil {
		t.Fatal(err)
	}
	if code, body := peerGet(); code != http.StatusForbidden || !strings.Contains(body, "removed from the cluster") {
		t.Fatalf("a removed node's certificate on the nodes' channel: %d %s, want 403", code, body)
	}
	refused := false
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if etcdGet() != nil {
			refused = true
			break
		}
	}
	if !refused {
		t.Fatal("a removed node's certificate is still let in by a member's etcd client listener 20 s after its removal")
	}
	if st := n1.m.Status(ctx); len(st.Members) != 2 || !st.Quorum {
		t.Fatalf("status after the removal: %+v", st)
	}
	if got := nodeCount(t, n1.m.DB()); got != 2 {
		t.Fatalf("node records after the removal: %d", got)
	}
}

// TestRecoveryKeySealedForTheJoin: the recovery key in a join's answer opens with the token's secret and
// id for the node it was handed to, and with nothing else.
func TestRecoveryKeySealedForTheJoin(t *testing.T) {
	key := bytes.Repeat([]byte{7}, 32)
	sealed, err := sealRecoveryKey(key, "jtk_1", "secret", "nod_1")
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(sealed, key) {
		t.Fatal("the key is in the clear")
	}
	if got, err := openRecoveryKey(sealed, "jtk_1", "secret", "nod_1"); err != nil || !bytes.Equal(got, key) {
		t.Fatalf("open: %v %x", err, got)
	}
	for _, c := range [][3]string{{"jtk_1", "other", "nod_1"}, {"jtk_2", "secret", "nod_1"}, {"jtk_1", "secret", "nod_2"}} {
		if _, err := openRecoveryKey(sealed, c[0], c[1], c[2]); err == nil {
			t.Fatalf("opened with %v", c)
		}
	}
	if _, err := openRecoveryKey(sealed[:5], "jtk_1", "secret", "nod_1"); err == nil {
		t.Fatal("opened a truncated key")
	}
}
