package acceptance

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/crypto/bcrypt"

	"github.com/theappliance/appliance/appliance"
	"github.com/theappliance/appliance/appliance/certs"
	"github.com/theappliance/appliance/appliance/ids"
	"github.com/theappliance/appliance/httpapi"
	"github.com/theappliance/appliance/store"
	"github.com/theappliance/appliance/store/etcdembed"
)

// countingKV is an etcd client's KV that notes each request it sends (a Get, a Txn with its compares and
// operations), while on.
type countingKV struct {
	clientv3.KV
	prefix string
	mu     sync.Mutex
	on     bool
	reqs   []string
}

func (c *countingKV) note(s string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.on {
		c.reqs = append(c.reqs, s)
	}
}

// take returns the requests noted since the last take.
func (c *countingKV) take() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.reqs
	c.reqs = nil
	return r
}

func (c *countingKV) key(k []byte) string { return strings.TrimPrefix(string(k), c.prefix) }

func (c *countingKV) op(op clientv3.Op) string {
	switch {
	case op.IsGet():
		s := "get " + c.key(op.KeyBytes())
		if op.RangeBytes() != nil {
			s += ".." + c.key(op.RangeBytes())
		}
		if op.IsSerializable() {
			s += " (local)"
		}
		return s
	case op.IsPut():
		return "put " + c.key(op.KeyBytes())
	case op.IsDelete():
		return "delete " + c.key(op.KeyBytes())
	}
	return "txn"
}

func (c *countingKV) Get(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	c.note(c.op(clientv3.OpGet(key, opts...)))
	return c.KV.Get(ctx, key, opts...)
}

func (c *countingKV) Put(ctx context.Context, key, val string, opts ...clientv3.OpOption) (*clientv3.PutResponse, error) {
	c.note("put " + c.key([]byte(key)))
	return c.KV.Put(ctx, key, val, opts...)
}

func (c *countingKV) Delete(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.DeleteResponse, error) {
	c.note("delete " + c.key([]byte(key)))
	return c.KV.Delete(ctx, key, opts...)
}

func (c *countingKV) Do(ctx context.Context, op clientv3.Op) (clientv3.OpResponse, error) {
	c.note(c.op(op))
	return c.KV.Do(ctx, op)
}

func (c *countingKV) Txn(ctx context.Context) clientv3.Txn {
	return &countingTxn{Txn: c.KV.Txn(ctx), c: c}
}

type countingTxn struct {
	clientv3.Txn
	c          *countingKV
	cmps, ops  int
	then, cmpd []string
}

func (t *countingTxn) If(cs ...clientv3.Cmp) clientv3.Txn {
	t.cmps += len(cs)
	for _, c := range cs {
		t.cmpd = append(t.cmpd, t.c.key(c.KeyBytes()))
	}
	t.Txn = t.Txn.If(cs...)
	return t
}

func (t *countingTxn) Then(ops ...clientv3.Op) clientv3.Txn {
	t.ops += len(ops)
	for _, op := range ops {
		t.then = append(t.then, t.c.op(op))
	}
	t.Txn = t.Txn.Then(ops...)
	return t
}

// Else: the operations of a commit whose compares failed (the store's reads back its layout record) are
// part of the same request.
func (t *countingTxn) Else(ops ...clientv3.Op) clientv3.Txn {
	t.Txn = t.Txn.Else(ops...)
	return t
}

func (t *countingTxn) Commit() (*clientv3.TxnResponse, error) {
	t.c.note(fmt.Sprintf("txn %d compares %q, %d ops %q", t.cmps, t.cmpd, t.ops, t.then))
	return t.Txn.Commit()
}

// etcdAPINode is an appliance's service and API over a store on etcd, in this process (no data plane:
// metadata writes only), with its HTTP server.
type etcdAPINode struct {
	db  *store.DB
	ts  *httptest.Server
	key string // an API key of the organization (every scope)
}

// newEtcdAPINode opens the store under prefix through cli and serves the API over it; the first node of a
// store bootstraps it (boot nil), the others take the first's bootstrap.
func newEtcdAPINode(t *testing.T, cli *clientv3.Client, prefix string, now time.Time, boot *appliance.Bootstrap) (*etcdAPINode, *appliance.Bootstrap) {
	t.Helper()
	dir := t.TempDir()
	db, err := store.OpenEtcd(cli, prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	box, err := appliance.OpenSecretBox(filepath.Join(dir, "secret.key"))
	if err != nil {
		t.Fatal(err)
	}
	ca, err := certs.LoadOrCreateCA(filepath.Join(dir, "ca"))
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	svc := appliance.New(appliance.Config{APIURL: "http://test", PublicHost: "localhost", Region: "local", Version: "test",
		PasswordCost: bcrypt.MinCost, CACertPath: ca.CertPath(), ListenHost: "127.0.0.1", DataDir: dir},
		appliance.Deps{DB: db, Box: box, Log: log, Clock: func() time.Time { return now }})
	if boot == nil {
		if boot, err = svc.EnsureBootstrap(t.Context(), filepath.Join(dir, "bootstrap.json"), ca.CertPath()); err != nil {
			t.Fatal(err)
		}
	}
	api := httpapi.New(svc, httpapi.Options{Log: log, Limits: httpapi.RateLimits{PerSecond: 1e6, Burst: 1e6, StrictPerSecond: 1e6, StrictBurst: 1e6}})
	ts := httptest.NewServer(api)
	t.Cleanup(func() { api.Close(); ts.Close() })
	return &etcdAPINode{db: db, ts: ts, key: boot.APIKey}, boot
}

// do sends a request with the node's key and returns the status and body; out, when not nil, takes the
// body of a want answer (any other status fails the test, when want is not 0).
func (n *etcdAPINode) do(t *testing.T, method, path string, body any, want int, out any) (int, []byte) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		buf, _ := json.Marshal(body)
		rd = bytes.NewReader(buf)
	}
	req, _ := http.NewRequest(method, n.ts.URL+path, rd)
	req.Header.Set("Authorization", "Bearer "+n.key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := n.ts.Client().Do(req)
	if err != nil {
		t.Error(err)
		return 0, nil
	}
	data, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if want != 0 && resp.StatusCode != want {
		t.Errorf("%s %s: %d %s", method, path, resp.StatusCode, data)
	}
	if out != nil && resp.StatusCode == want {
		if err := json.Unmarshal(data, out); err != nil {
			t.Error(err)
		}
	}
	return resp.StatusCode, data
}

// etcdAPIProject makes a project record in the node's organization (no instance: the writes of these
// tests are metadata only).
func etcdAPIProject(t *testing.T, db *store.DB, orgID string, now time.Time) string {
	t.Helper()
	prj := &store.Project{ID: ids.New("prj"), Name: "bench", Slug: "bench", OrganizationID: orgID, State: "active",
		Environment: "development", CreatedAt: now, UpdatedAt: now}
	if err := db.Update(func(tx *store.Tx) error { return store.Projects.Insert(tx, prj) }); err != nil {
		t.Fatal(err)
	}
	return prj.ID
}

type savedQueryResponse struct {
	SavedQuery struct {
		ID   string `json:"id"`
		Name string `json:"name"`
	} `json:"saved_query"`
}

// TestClusterAPIWriteRequests counts the etcd requests each of BenchmarkClusterAPIWrites' four API writes
// makes, the whole HTTP request (authentication included) on an appliance service whose store is on etcd
// (in this process, over a real member), in the bench's order, after a warm iteration; it fails when one
// makes more than the commit alone (a request more is a round trip more: issue 35's write ratio; the
// saved queries' name check and limit once walked the project's saved queries, two requests, and a
// key's organization was read again after each PATCH of it, a linearizable read). Deterministic: it
// counts requests and times nothing (the bench measures the time). -v lists each request.
func TestClusterAPIWriteRequests(t *testing.T) {
	srv, err := etcdembed.Start(t.Context(), etcdembed.Config{Dir: filepath.Join(t.TempDir(), "member"), LogLevel: "fatal"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	cli, err := srv.Client()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	const prefix = "/appliance/meta/"
	kv := &countingKV{KV: cli.KV, prefix: prefix}
	cli.KV = kv
	// A clock that stands still: the key's last use is written once (at most once a minute), not at a
	// minute's turn in the middle of the count.
	now := time.Now().UTC()
	n, boot := newEtcdAPINode(t, cli, prefix, now, nil)
	prj := etcdAPIProject(t, n.db, boot.OrganizationID, now)
	var patched savedQueryResponse
	n.do(t, http.MethodPost, "/v1/projects/"+prj+"/saved-queries", map[string]any{"name": "patched", "sql": "SELECT 0"}, http.StatusCreated, &patched)

	// The bench's iteration (benchTarget.iteration), each write's requests noted apart.
	got := map[string][][]string{}
	iteration := func(seq int) {
		v := fmt.Sprint(seq)
		kv.take()
		n.do(t, http.MethodPatch, "/v1/organizations/"+boot.OrganizationID, map[string]any{"name": "bench " + v}, http.StatusOK, nil)
		got[benchWriteOps[0]] = append(got[benchWriteOps[0]], kv.take())
		n.do(t, http.MethodPatch, "/v1/projects/"+prj+"/saved-queries/"+patched.SavedQuery.ID, map[string]any{"sql": "SELECT " + v}, http.StatusOK, nil)
		got[benchWriteOps[1]] = append(got[benchWriteOps[1]], kv.take())
		var created savedQueryResponse
		n.do(t, http.MethodPost, "/v1/projects/"+prj+"/saved-queries", map[string]any{"name": "bench " + v, "sql": "SELECT 1"}, http.StatusCreated, &created)
		got[benchWriteOps[2]] = append(got[benchWriteOps[2]], kv.take())
		n.do(t, http.MethodDelete, "/v1/projects/"+prj+"/saved-queries/"+created.SavedQuery.ID, nil, http.StatusOK, nil)
		got[benchWriteOps[3]] = append(got[benchWriteOps[3]], kv.take())
	}
	iteration(0) // warm: the key's principal cached, its last use written
	kv.mu.Lock()
	kv.on = true
	kv.mu.Unlock()
	clear(got)
	for seq := 1; seq <= 5; seq++ {
		iteration(seq)
	}
	// Not the bench's: a PATCH of a saved query with its name (its own, in other case, then a new one, then
	// back), each its commit alone too (a name the first attempt took as free and the commit found taken
	// would be a commit that fails and a run again).
	sq := "/v1/projects/" + prj + "/saved-queries/" + patched.SavedQuery.ID
	for _, name := range []string{"patched", "PATCHED", "renamed", "patched"} {
		n.do(t, http.MethodPatch, sq, map[string]any{"name": name, "sql": "SELECT 2"}, http.StatusOK, nil)
		op := "PATCH saved query, name " + name
		got[op] = append(got[op], kv.take())
	}
	if t.Failed() {
		return
	}
	for _, op := range slices.Sorted(maps.Keys(got)) {
		for i, reqs := range got[op] {
			t.Logf("%s #%d: %d requests", op, i+1, len(reqs))
			for _, r := range reqs {
				t.Logf("    %s", r)
			}
			// The commit alone: one Txn that writes.
			if len(reqs) != 1 || !strings.HasPrefix(reqs[0], "txn ") || strings.Contains(reqs[0], " 0 ops") {
				t.Errorf("%s #%d made %d etcd requests, want its commit alone: %q", op, i+1, len(reqs), reqs)
			}
		}
	}
}

// TestClusterSavedQueryNameRace: two nodes (a store each, through different members of a cluster of three)
// create saved queries of one name in one project at once, the names differing in case: each time one is
// made and the other refused with 409 and the winner's name, and the project's count of saved queries (its
// limit's) is what the list shows. Renames on either node: to a name another query holds, 409 with its
// name; to its own in other case, and to a name just deleted, made. The name check is a unique index's key that the first attempt of the
// transaction takes as free, its commit proving it (store.Table.Holder).
func TestClusterSavedQueryNameRace(t *testing.T) {
	dirs := []string{t.TempDir(), t.TempDir(), t.TempDir()}
	c, err := etcdembed.StartCluster(t.Context(), etcdembed.ClusterConfig{Dirs: dirs, LogLevel: "fatal"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	const prefix = "/appliance/meta/"
	now := time.Now().UTC()
	var nodes []*etcdAPINode
	var boot *appliance.Bootstrap
	for i := range 2 {
		cli, err := c.MemberClient(i)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cli.Close() })
		var n *etcdAPINode
		n, boot = newEtcdAPINode(t, cli, prefix, now, boot)
		nodes = append(nodes, n)
	}
	prj := etcdAPIProject(t, nodes[0].db, boot.OrganizationID, now)
	path := "/v1/projects/" + prj + "/saved-queries"
	const rounds = 20
	for r := range rounds {
		names := []string{fmt.Sprintf("Report %d", r), fmt.Sprintf("rEPORT %d", r)}
		type answer struct {
			status int
			body   []byte
		}
		answers := make([]answer, 2)
		var start, done sync.WaitGroup
		start.Add(1)
		for i, n := range nodes {
			done.Add(1)
			go func() {
				defer done.Done()
				start.Wait()
				answers[i].status, answers[i].body = n.do(t, http.MethodPost, path, map[string]any{"name": names[i], "sql": "SELECT 1"}, 0, nil)
			}()
		}
		start.Done()
		done.Wait()
		won := -1
		for i, a := range answers {
			if a.status == http.StatusCreated {
				if won >= 0 {
					t.Fatalf("round %d: both nodes made a saved query named %q and %q", r, names[0], names[1])
				}
				won = i
			}
		}
		if won < 0 {
			t.Fatalf("round %d: no node made the saved query: %d %s; %d %s", r, answers[0].status, answers[0].body, answers[1].status, answers[1].body)
		}
		lost := answers[1-won]
		want := fmt.Sprintf("the project already has a saved query named %q", names[won])
		if lost.status != http.StatusConflict || !strings.Contains(string(lost.body), strings.ReplaceAll(want, `"`, `\"`)) {
			t.Fatalf("round %d: the other node answered %d %s, want 409 %s", r, lost.status, lost.body, want)
		}
	}
	// Renames: to a name another query holds (in other case), refused with its name; to its own in other
	// case, and to a name deleted on the other node, made.
	var a, b savedQueryResponse
	nodes[0].do(t, http.MethodPost, path, map[string]any{"name": "Alpha", "sql": "SELECT 1"}, http.StatusCreated, &a)
	nodes[1].do(t, http.MethodPost, path, map[string]any{"name": "Beta", "sql": "SELECT 1"}, http.StatusCreated, &b)
	status, body := nodes[0].do(t, http.MethodPatch, path+"/"+a.SavedQuery.ID, map[string]any{"name": "BETA"}, http.StatusConflict, nil)
	if status != http.StatusConflict || !strings.Contains(string(body), `the project already has a saved query named \"Beta\"`) {
		t.Fatalf("a rename to a name taken: %d %s", status, body)
	}
	var renamed savedQueryResponse
	nodes[0].do(t, http.MethodPatch, path+"/"+a.SavedQuery.ID, map[string]any{"name": "ALPHA"}, http.StatusOK, &renamed)
	if renamed.SavedQuery.Name != "ALPHA" {
		t.Fatalf("renamed to its own name in other case: %q", renamed.SavedQuery.Name)
	}
	nodes[1].do(t, http.MethodDelete, path+"/"+b.SavedQuery.ID, nil, http.StatusOK, nil)
	nodes[0].do(t, http.MethodPatch, path+"/"+a.SavedQuery.ID, map[string]any{"name": "beta"}, http.StatusOK, nil)
	nodes[1].do(t, http.MethodDelete, path+"/"+a.SavedQuery.ID, nil, http.StatusOK, nil)

	var list struct {
		SavedQueries []struct {
			Name string `json:"name"`
		} `json:"saved_queries"`
	}
	nodes[1].do(t, http.MethodGet, path, nil, http.StatusOK, &list)
	if len(list.SavedQueries) != rounds {
		t.Fatalf("the project lists %d saved queries after %d rounds: %v", len(list.SavedQueries), rounds, list.SavedQueries)
	}
	for _, n := range nodes {
		var count int
		if err := n.db.Update(func(tx *store.Tx) error { // an Update: its reads are proven current
			count, err = store.SavedQueries.Count(tx, store.SavedQueriesByProject, prj)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		if count != rounds {
			t.Errorf("the project's saved queries count %d, want %d", count, rounds)
		}
	}
}
