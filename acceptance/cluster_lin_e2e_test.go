package acceptance

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/theappliance/appliance/appliance/appliancetest"
)

// The metadata a cluster's API serves is linearizable (issue 35): clients on each of the three nodes' HTTP
// APIs run concurrent operations on a few records while a member is SIGKILLed and restarted, and another
// SIGSTOPped and continued; porcupine then finds an order of the operations, each taking effect at one
// instant between its request and its answer, that one copy of the records explains.
//
// The API has no ETag/If-Match or version field to make a read-modify-write conditional; what it has is a
// uniqueness check inside a write: a saved query's rename answers 409 when another saved query of the
// project has the name (case-insensitively). The records are therefore linSaved saved queries of one
// project, renamed among linNames names (so that renames collide) and given new text, read one by one and
// all at once (the list, one read of the store), and the organization's profile (name and billing name,
// patched one or both at once; the PATCH answers the whole profile). Every write answers the record as
// it left it, so a write is checked as a read too. The saved queries' routes and the organization's are
// answered by whichever node is asked (no forwarding to the project's node).
//
// Outcomes, as the store's own test (store/linearizable_test.go) models them: a read that failed changed
// nothing (left out); a request refused before it was sent (connection refused: the node is down) was
// not made (left out); a 409 of a rename is a result (the model must agree that the name was taken); any
// other failed write (a timeout, a 503 without quorum, a connection cut under the request) has an
// unknown outcome: it is recorded as returning after every other operation with its result unknown, so it
// may take effect at any instant after its call, or never.

const (
	linSaved = 3 // saved queries
	linNames = 5 // names they are renamed among
)

// linAPIState is the model's state: each saved query's name and text, and the organization's profile.
type linAPIState struct {
	names, sqls         [linSaved]string
	orgName, orgBilling string
}

type linAPIKind int

const (
	linGetSaved  linAPIKind = iota // GET a saved query
	linListSaved                   // GET the list: every saved query, one read
	linSetSQL                      // PATCH a saved query's sql
	linRename                      // PATCH a saved query's name (409 when another has it)
	linRenameSQL                   // PATCH both
	linGetOrg                      // GET the organization
	linPatchOrg                    // PATCH its name, its billing name or both
)

type linAPIInput struct {
	kind       linAPIKind
	q          int    // the saved query
	name, sql  string // what a PATCH sets ("": not set)
	billing    string // the organization's billing name a PATCH sets ("": not set)
	unknownOut bool   // the outcome is unknown (the write failed)
}

type linAPIOutput struct {
	conflict  bool             // a rename answered 409
	name, sql string           // the saved query as answered
	names     [linSaved]string // the list's
	sqls      [linSaved]string // the list's
	org       [2]string        // the organization's name and billing name as answered
}

// linNameTaken says whether a saved query other than q is named name (case-insensitively, as the API
// compares).
func linNameTaken(s linAPIState, q int, name string) bool {
	for i, n := range s.names {
		if i != q && strings.EqualFold(n, name) {
			return true
		}
	}
	return false
}

var linAPIModel = porcupine.Model{
	// The organization and the saved queries share nothing: two partitions, checked apart.
	Partition: func(ops []porcupine.Operation) [][]porcupine.Operation {
		var saved, org []porcupine.Operation
		for _, op := range ops {
			switch op.Input.(linAPIInput).kind {
			case linGetOrg, linPatchOrg:
				org = append(org, op)
			default:
				saved = append(saved, op)
			}
		}
		return [][]porcupine.Operation{saved, org}
	},
	Init: func() any {
		var s linAPIState
		for i := range s.names {
			s.names[i], s.sqls[i] = linName(i), "SELECT 0"
		}
		s.orgName, s.orgBilling = "lin-org", "lin-billing"
		return s
	},
	Hash: func(state any) uint64 {
		h := fnv.New64a()
		fmt.Fprintf(h, "%v", state)
		return h.Sum64()
	},
	Step: func(state, input, output any) (bool, any) {
		s, in, out := state.(linAPIState), input.(linAPIInput), output.(linAPIOutput)
		q := in.q
		switch in.kind {
		case linGetSaved:
			return out.name == s.names[q] && out.sql == s.sqls[q], s
		case linListSaved:
			return out.names == s.names && out.sqls == s.sqls, s
		case linSetSQL, linRename, linRenameSQL:
			if in.name != "" && linNameTaken(s, q, in.name) {
				// Refused, nothing changed (an unknown outcome may be this refusal too).
				return in.unknownOut || out.conflict, s
			}
			if in.name != "" {
				s.names[q] = in.name
			}
			if in.sql != "" {
				s.sqls[q] = in.sql
			}
			return in.unknownOut || !out.conflict && out.name == s.names[q] && out.sql == s.sqls[q], s
		case linGetOrg:
			return out.org == [2]string{s.orgName, s.orgBilling}, s
		case linPatchOrg:
			if in.name != "" {
				s.orgName = in.name
			}
			if in.billing != "" {
				s.orgBilling = in.billing
			}
			return in.unknownOut || out.org == [2]string{s.orgName, s.orgBilling}, s
		}
		panic(fmt.Sprintf("no operation %d", in.kind))
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(linAPIInput), output.(linAPIOutput)
		var res string
		switch in.kind {
		case linGetSaved:
			res = fmt.Sprintf("get(q%d) -> %q %q", in.q, out.name, out.sql)
		case linListSaved:
			res = fmt.Sprintf("list -> %q %q", out.names, out.sqls)
		case linSetSQL, linRename, linRenameSQL:
			res = fmt.Sprintf("patch(q%d, name %q, sql %q) -> %q %q", in.q, in.name, in.sql, out.name, out.sql)
			if out.conflict {
				res = fmt.Sprintf("patch(q%d, name %q, sql %q) -> 409", in.q, in.name, in.sql)
			}
		case linGetOrg:
			res = fmt.Sprintf("get(org) -> %q", out.org)
		case linPatchOrg:
			res = fmt.Sprintf("patch(org, name %q, billing %q) -> %q", in.name, in.billing, out.org)
		}
		if in.unknownOut {
			res += " (failed: outcome unknown)"
		}
		return res
	},
	DescribeState: func(state any) string { return fmt.Sprintf("%+v", state.(linAPIState)) },
}

// linName is the i-th of the names the saved queries take (mixed case: the API compares them folded).
func linName(i int) string {
	if i%2 == 1 {
		return fmt.Sprintf("Lin-%d", i)
	}
	return fmt.Sprintf("lin-%d", i)
}

// linAPICheck asserts porcupine's verdict on the history, writing a visualisation of it when it differs.
func linAPICheck(t *testing.T, model porcupine.Model, ops []porcupine.Operation, want porcupine.CheckResult) {
	t.Helper()
	res, info := porcupine.CheckOperationsVerbose(model, ops, 5*time.Minute)
	if res == want {
		return
	}
	path := filepath.Join(os.TempDir(), fmt.Sprintf("lin-history-%d.html", time.Now().UnixNano()))
	if err := porcupine.VisualizePath(model, info, path); err != nil {
		t.Logf("visualise the history: %v", err)
	}
	t.Fatalf("porcupine says %s of %d operations, want %s (the history: %s)", res, len(ops), want, path)
}

// linAPIHistory records the operations with their call and return times.
type linAPIHistory struct {
	start   time.Time
	mu      sync.Mutex
	ops     []porcupine.Operation
	unknown []int // indexes in ops of the operations whose outcome is unknown
	left    map[string]int
	done    atomic.Int64
	each    []atomic.Int64 // operations answered (with a result), by client
}

func (h *linAPIHistory) now() int64 { return time.Since(h.start).Nanoseconds() }

func (h *linAPIHistory) history() []porcupine.Operation {
	h.mu.Lock()
	defer h.mu.Unlock()
	end := h.now() + 1
	for _, i := range h.unknown {
		h.ops[i].Return = end
	}
	return h.ops
}

// linNodes are the cluster's nodes as the clients reach them: a node restarted has a new API address.
type linNodes struct {
	mu    sync.Mutex
	procs []*e2eProc
	gone  []*e2eProc // the processes replaced (killed, started again)
}

func (n *linNodes) get(i int) *e2eProc {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.procs[i]
}

func (n *linNodes) set(i int, p *e2eProc) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.gone = append(n.gone, n.procs[i])
	n.procs[i] = p
}

// failures are the nodes' log lines of requests that failed (an internal error or an unavailable store:
// what the 5xx answers the clients counted were), at most max.
func (n *linNodes) failures(max int) []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []string
	for _, p := range append(append([]*e2eProc{}, n.gone...), n.procs...) {
		for _, l := range strings.Split(p.stderr.String()+p.stdout.String(), "\n") {
			if strings.Contains(l, `msg="request failed"`) && len(out) < max {
				out = append(out, p.dataDir+": "+l)
			}
		}
	}
	return out
}

// linClient is one client of one node's API.
type linClient struct {
	id, node  int
	nodes     *linNodes
	key, org  string
	prj       string
	savedIDs  []string
	h         *linAPIHistory
	http      map[*e2eProc]*http.Client
	errorsOut atomic.Pointer[string] // a 4xx or an undecodable answer: the API misbehaved (reported at the end)
}

// request sends one request to the client's node. sent says whether it may have reached the node.
func (c *linClient) request(method, path string, body any) (status int, data []byte, sent bool, err error) {
	p := c.nodes.get(c.node)
	cl := c.http[p]
	if cl == nil {
		cl = &http.Client{Timeout: 15 * time.Second, Transport: p.client.Transport}
		c.http[p] = cl
	}
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, p.api+path, rd)
	req.Header.Set("Authorization", "Bearer "+c.key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := cl.Do(req)
	if err != nil {
		return 0, nil, !errors.Is(err, syscall.ECONNREFUSED), err
	}
	defer resp.Body.Close()
	data, err = io.ReadAll(resp.Body)
	if err != nil {
		return 0, nil, true, err
	}
	return resp.StatusCode, data, true, nil
}

// fail notes an answer the API must not give.
func (c *linClient) fail(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	c.errorsOut.CompareAndSwap(nil, &msg)
}

// do runs in and records it.
func (c *linClient) do(in linAPIInput) {
	var (
		method, path string
		body         any
	)
	switch in.kind {
	case linGetSaved:
		method, path = http.MethodGet, "/v1/projects/"+c.prj+"/saved-queries/"+c.savedIDs[in.q]
	case linListSaved:
		method, path = http.MethodGet, "/v1/projects/"+c.prj+"/saved-queries"
	case linSetSQL, linRename, linRenameSQL:
		m := map[string]string{}
		if in.name != "" {
			m["name"] = in.name
		}
		if in.sql != "" {
			m["sql"] = in.sql
		}
		method, path, body = http.MethodPatch, "/v1/projects/"+c.prj+"/saved-queries/"+c.savedIDs[in.q], m
	case linGetOrg:
		method, path = http.MethodGet, "/v1/organizations/"+c.org
	case linPatchOrg:
		m := map[string]string{}
		if in.name != "" {
			m["name"] = in.name
		}
		if in.billing != "" {
			m["billing_name"] = in.billing
		}
		method, path, body = http.MethodPatch, "/v1/organizations/"+c.org, m
	}
	read := method == http.MethodGet
	call := c.h.now()
	status, data, sent, err := c.request(method, path, body)
	ret := c.h.now()
	var out linAPIOutput
	outcome := "ok" // ok, left (changed nothing, or not made), unknown
	switch {
	case err != nil || status >= 500:
		why := fmt.Sprint(err)
		if err == nil {
			why = fmt.Sprintf("%d %s", status, bytes.TrimSpace(data))
			if len(why) > 120 {
				why = why[:120]
			}
		}
		outcome = "unknown"
		if read || !sent {
			outcome = "left"
		}
		c.h.mu.Lock()
		c.h.left[outcome+": "+linWhy(why)]++
		c.h.mu.Unlock()
	case status == http.StatusConflict && in.name != "" && !read:
		out.conflict = true
	case status != http.StatusOK:
		c.fail("%s %s on node %d: %d %s", method, path, c.node+1, status, data)
		outcome = "left"
	default:
		if err := linDecode(in, data, c.savedIDs, &out); err != nil {
			c.fail("%s %s on node %d: %v: %s", method, path, c.node+1, err, data)
			outcome = "left"
		}
	}
	op := porcupine.Operation{ClientId: c.id, Input: in, Call: call, Output: out, Return: ret}
	c.h.mu.Lock()
	switch outcome {
	case "ok":
		c.h.ops = append(c.h.ops, op)
	case "unknown":
		in.unknownOut = true
		op.Input, op.Output, op.Return = in, linAPIOutput{}, 0
		c.h.unknown = append(c.h.unknown, len(c.h.ops))
		c.h.ops = append(c.h.ops, op)
	}
	c.h.mu.Unlock()
	if outcome == "ok" {
		c.h.each[c.id].Add(1)
	}
	c.h.done.Add(1)
	if outcome != "ok" {
		time.Sleep(50 * time.Millisecond) // a node down refuses at once: no busy loop
	}
}

// linWhy shortens an error to its kind, for the tally of failed operations.
func linWhy(why string) string {
	if strings.HasPrefix(why, "500") {
		return why // an internal error: its message
	}
	for _, k := range []string{"connection refused", "connection reset", "Client.Timeout", "EOF", "no quorum", "503", "502"} {
		if strings.Contains(why, k) {
			return k
		}
	}
	return why
}

// linDecode reads an answer into out.
func linDecode(in linAPIInput, data []byte, savedIDs []string, out *linAPIOutput) error {
	type saved struct {
		ID   string `json:"id"`
		Name string `json:"name"`
		SQL  string `json:"sql"`
	}
	switch in.kind {
	case linGetSaved, linSetSQL, linRename, linRenameSQL:
		var v struct {
			SavedQuery *saved `json:"saved_query"`
		}
		if err := json.Unmarshal(data, &v); err != nil || v.SavedQuery == nil || v.SavedQuery.ID != savedIDs[in.q] {
			return fmt.Errorf("not saved query %s (%v)", savedIDs[in.q], err)
		}
		out.name, out.sql = v.SavedQuery.Name, v.SavedQuery.SQL
	case linListSaved:
		var v struct {
			SavedQueries []saved `json:"saved_queries"`
		}
		if err := json.Unmarshal(data, &v); err != nil || len(v.SavedQueries) != linSaved {
			return fmt.Errorf("not %d saved queries (%v)", linSaved, err)
		}
		for _, s := range v.SavedQueries {
			i := -1
			for j, id := range savedIDs {
				if id == s.ID {
					i = j
				}
			}
			if i < 0 {
				return fmt.Errorf("saved query %s is not the test's", s.ID)
			}
			out.names[i], out.sqls[i] = s.Name, s.SQL
		}
	case linGetOrg, linPatchOrg:
		var v struct {
			Organization *struct {
				Name        string `json:"name"`
				BillingName string `json:"billing_name"`
			} `json:"organization"`
		}
		if err := json.Unmarshal(data, &v); err != nil || v.Organization == nil {
			return fmt.Errorf("no organization (%v)", err)
		}
		out.org = [2]string{v.Organization.Name, v.Organization.BillingName}
	}
	return nil
}

// linNext is a client's next operation (seq makes the values it writes its own).
func linNext(rnd *rand.Rand, client int, seq int64) linAPIInput {
	in := linAPIInput{q: rnd.IntN(linSaved)}
	val := fmt.Sprintf("%d-%d", client, seq)
	switch p := rnd.IntN(100); {
	case p < 22:
		in.kind = linGetSaved
	case p < 34:
		in.kind = linListSaved
	case p < 52:
		in.kind, in.sql = linSetSQL, "SELECT '"+val+"'"
	case p < 72:
		in.kind, in.name = linRename, linName(rnd.IntN(linNames))
	case p < 80:
		in.kind, in.name, in.sql = linRenameSQL, linName(rnd.IntN(linNames)), "SELECT '"+val+"'"
	case p < 90:
		in.kind = linGetOrg
	default:
		in.kind = linPatchOrg
		switch rnd.IntN(3) {
		case 0:
			in.name = "org " + val
		case 1:
			in.billing = "billing " + val
		default:
			in.name, in.billing = "org "+val, "billing "+val
		}
	}
	return in
}

// TestClusterLinearizableAPI: three nodes, two clients on each node's API; after 150 operations the node
// whose etcd member leads is SIGKILLed (with its instances), and started again once the others answered
// 60 more; once its clients are answered again, the node leading then (another) is SIGSTOPped while the
// third node's clients are answered 300 times, and continued; once every client is answered again, the
// history is checked.
func TestClusterLinearizableAPI(t *testing.T) {
	t.Parallel()
	bin := e2eBuild(t)
	dirs := make([]string, 3)
	for i := range dirs {
		dirs[i] = appliancetest.TraversableTempDir(t)
		d := dirs[i]
		t.Cleanup(func() { e2eKillUnder(t, d) })
	}
	node1Flags := []string{"--spare-clusters", "0"}
	a1 := e2eStartWith(t, bin, dirs[0], nil, node1Flags)
	admin := e2eAdminKey(t, dirs[0])
	var boot struct {
		OrganizationID string `json:"organization_id"`
	}
	b, _ := os.ReadFile(filepath.Join(dirs[0], "bootstrap.json"))
	if err := json.Unmarshal(b, &boot); err != nil || boot.OrganizationID == "" {
		t.Fatalf("bootstrap.json: %v", err)
	}
	prj := a1.e2eProvision(t, admin, "linearizable")
	a1.stop(t, syscall.SIGTERM)
	nodes := &linNodes{procs: clusterOfThree(t, bin, dirs, nil, node1Flags, nil)}
	a1 = nodes.get(0)
	info := clusterNodes(t, bin, dirs[0])
	if len(info) != 3 {
		t.Fatalf("cluster nodes: %+v", info)
	}

	// The records, as the model's Init has them.
	init := linAPIModel.Init().(linAPIState)
	a1.do(t, admin, http.MethodPatch, "/v1/organizations/"+boot.OrganizationID, map[string]any{"name": init.orgName, "billing_name": init.orgBilling}, http.StatusOK, nil)
	savedIDs := make([]string, linSaved)
	for i := range savedIDs {
		var v struct {
			SavedQuery struct {
				ID string `json:"id"`
			} `json:"saved_query"`
		}
		a1.do(t, admin, http.MethodPost, "/v1/projects/"+prj+"/saved-queries", map[string]any{"name": init.names[i], "sql": init.sqls[i]}, http.StatusCreated, &v)
		savedIDs[i] = v.SavedQuery.ID
	}
	const clients = 6
	h := &linAPIHistory{start: time.Now(), left: map[string]int{}, each: make([]atomic.Int64, clients)}
	cls := make([]*linClient, clients)
	for i := range cls {
		cls[i] = &linClient{id: i, node: i % 3, nodes: nodes, key: admin, org: boot.OrganizationID, prj: prj, savedIDs: savedIDs,
			h: h, http: map[*e2eProc]*http.Client{}}
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, c := range cls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rnd := rand.New(rand.NewPCG(uint64(c.id), 35))
			for seq := int64(1); ; seq++ {
				select {
				case <-stop:
					return
				default:
				}
				c.do(linNext(rnd, c.id, seq))
			}
		}()
	}
	stopped := false
	stopClients := func() {
		if !stopped {
			stopped = true
			close(stop)
			wg.Wait()
		}
	}
	defer stopClients()
	ctx, cancel := context.WithTimeout(t.Context(), 6*time.Minute)
	defer cancel()
	// waitOps waits for n more operations answered by the clients of nodes (all when nil).
	waitOps := func(n int64, nodesOf ...int) {
		t.Helper()
		var which []int
		for _, c := range cls {
			if len(nodesOf) == 0 || c.node == nodesOf[0] {
				which = append(which, c.id)
			}
		}
		for _, id := range which {
			target := h.each[id].Load() + n/int64(len(which))
			for h.each[id].Load() < target {
				select {
				case <-ctx.Done():
					t.Fatalf("client %d (node %d) answered %d operations, waiting for %d: %v", id, cls[id].node+1, h.each[id].Load(), target, ctx.Err())
				case <-time.After(20 * time.Millisecond):
				}
			}
		}
	}

	// watcher is a node other than skip, to ask who leads.
	watcher := func(skip int) *e2eProc { return nodes.get((skip + 1) % 3) }
	waitOps(150)
	victim := clusterLeader(t, a1, info) // the leader: an election while the clients work
	if victim < 0 {
		victim = 2
	}
	t.Logf("SIGKILL node %d (the leader: node %d) after %d operations", victim+1, clusterLeader(t, a1, info)+1, h.done.Load())
	killNode(t, nodes.get(victim), dirs[victim])
	waitOps(60, (victim+1)%3) // the others go on
	t.Logf("leader with node %d down: node %d", victim+1, clusterLeader(t, watcher(victim), info)+1)
	began := time.Now()
	nodes.set(victim, e2eStartWith(t, bin, dirs[victim], nil, clusterFlags(t, clusterHosts[victim], dirs[victim])))
	t.Logf("node %d started again in %v (after %d operations)", victim+1, time.Since(began), h.done.Load())
	waitOps(20, victim) // its clients are answered again

	// The new leader stopped (its sockets open, nothing answered): another election, and the stopped
	// leader, continued, finds itself deposed. The restarted node is not the one stopped: the quorum stays.
	paused := clusterLeader(t, watcher(victim), info)
	if paused < 0 || paused == victim {
		paused = (victim + 1) % 3
	}
	t.Logf("SIGSTOP node %d (leader: node %d) after %d operations", paused+1, clusterLeader(t, watcher(paused), info)+1, h.done.Load())
	if err := nodes.get(paused).cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	waitOps(300, 3-victim-paused) // the third node's clients: a few seconds, elections included
	t.Logf("leader with node %d stopped: node %d", paused+1, clusterLeader(t, watcher(paused), info)+1)
	if err := nodes.get(paused).cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	t.Logf("SIGCONT node %d after %d operations", paused+1, h.done.Load())
	waitOps(20, paused)
	waitOps(60)
	stopClients()
	for _, c := range cls {
		if msg := c.errorsOut.Load(); msg != nil {
			t.Errorf("client %d: %s", c.id, *msg)
		}
	}

	for _, l := range nodes.failures(10) {
		t.Logf("a failed request: %s", l)
	}
	ops := h.history()
	counts := map[linAPIKind]int{}
	conflicts := 0
	for _, op := range ops {
		counts[op.Input.(linAPIInput).kind]++
		if op.Output.(linAPIOutput).conflict {
			conflicts++
		}
	}
	t.Logf("%d operations: %d gets, %d lists, %d sql patches, %d renames (%d refused with 409), %d renames with sql, %d org gets, %d org patches; %d with an unknown outcome; not recorded or unknown, by cause: %v",
		len(ops), counts[linGetSaved], counts[linListSaved], counts[linSetSQL], counts[linRename], conflicts, counts[linRenameSQL], counts[linGetOrg], counts[linPatchOrg], len(h.unknown), h.left)
	if conflicts == 0 || counts[linRename]+counts[linRenameSQL]-conflicts == 0 || counts[linListSaved] == 0 || counts[linPatchOrg] == 0 {
		t.Fatal("the history lacks a kind of operation or outcome")
	}
	began = time.Now()
	linAPICheck(t, linAPIModel, ops, porcupine.Ok)
	t.Logf("checked in %v", time.Since(began))
}

// The model finds what it must: histories the API must not produce are not linearizable.
func TestClusterLinearizableAPIModelRejects(t *testing.T) {
	op := func(client int, in linAPIInput, out linAPIOutput, call, ret int64) porcupine.Operation {
		return porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret}
	}
	init := linAPIModel.Init().(linAPIState)
	// A stale read: the text patched, then read as before.
	stale := []porcupine.Operation{
		op(0, linAPIInput{kind: linSetSQL, q: 0, sql: "SELECT 1"}, linAPIOutput{name: init.names[0], sql: "SELECT 1"}, 0, 10),
		op(1, linAPIInput{kind: linGetSaved, q: 0}, linAPIOutput{name: init.names[0], sql: "SELECT 0"}, 20, 30),
	}
	linAPICheck(t, linAPIModel, stale, porcupine.Illegal)
	// Two saved queries renamed to one name (case apart), both accepted.
	dup := []porcupine.Operation{
		op(0, linAPIInput{kind: linRename, q: 0, name: "lin-4"}, linAPIOutput{name: "lin-4", sql: "SELECT 0"}, 0, 10),
		op(1, linAPIInput{kind: linRename, q: 1, name: "LIN-4"}, linAPIOutput{name: "LIN-4", sql: "SELECT 0"}, 5, 15),
	}
	linAPICheck(t, linAPIModel, dup, porcupine.Illegal)
	// A rename refused for a name nobody had.
	refused := []porcupine.Operation{
		op(0, linAPIInput{kind: linRename, q: 0, name: "lin-4"}, linAPIOutput{conflict: true}, 0, 10),
	}
	linAPICheck(t, linAPIModel, refused, porcupine.Illegal)
	// The list sees half of a patch of two fields.
	torn := []porcupine.Operation{
		op(0, linAPIInput{kind: linRenameSQL, q: 2, name: "Lin-3", sql: "SELECT 3"}, linAPIOutput{name: "Lin-3", sql: "SELECT 3"}, 0, 10),
		op(1, linAPIInput{kind: linListSaved}, linAPIOutput{names: [linSaved]string{init.names[0], init.names[1], "Lin-3"}, sqls: init.sqls}, 5, 15),
	}
	linAPICheck(t, linAPIModel, torn, porcupine.Illegal)
	// A lost update of the organization: two patches of different fields, the second answering without the
	// first's after it returned.
	lost := []porcupine.Operation{
		op(0, linAPIInput{kind: linPatchOrg, name: "org a"}, linAPIOutput{org: [2]string{"org a", init.orgBilling}}, 0, 10),
		op(1, linAPIInput{kind: linPatchOrg, billing: "billing b"}, linAPIOutput{org: [2]string{init.orgName, "billing b"}}, 20, 30),
	}
	linAPICheck(t, linAPIModel, lost, porcupine.Illegal)
	// A patch whose outcome is unknown may have been made, or not...
	unknown := []porcupine.Operation{
		op(0, linAPIInput{kind: linSetSQL, q: 1, sql: "SELECT 9", unknownOut: true}, linAPIOutput{}, 0, 100),
		op(1, linAPIInput{kind: linGetSaved, q: 1}, linAPIOutput{name: init.names[1], sql: "SELECT 0"}, 10, 20),
		op(1, linAPIInput{kind: linGetSaved, q: 1}, linAPIOutput{name: init.names[1], sql: "SELECT 9"}, 30, 40),
	}
	linAPICheck(t, linAPIModel, unknown, porcupine.Ok)
	// ...but once seen, it stays.
	unknown = append(unknown, op(1, linAPIInput{kind: linGetSaved, q: 1}, linAPIOutput{name: init.names[1], sql: "SELECT 0"}, 50, 60))
	linAPICheck(t, linAPIModel, unknown, porcupine.Illegal)
}
