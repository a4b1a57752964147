package acceptance

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/theappliance/appliance/appliance/appliancetest"
	"github.com/theappliance/appliance/appliance/cluster"
)

// Issue 35's two figures (measurements, not tests: they assert no time; run only with -bench). They live
// here rather than in bench/ because they drive the real binary with this package's e2e helpers, as
// BenchmarkRecover does. See bench/README.md, "A cluster of three: API writes and node loss (issue 35)".

// benchTarget is one appliance the writes go to, with what they write.
type benchTarget struct {
	name      string
	p         *e2eProc
	key, org  string
	prj, sqID string
	lat       map[string][]time.Duration // by operation
}

// benchWriteOps are the API writes timed, in the order of one iteration: metadata only, answered by any
// node (no forwarding to the project's node), each one store transaction.
var benchWriteOps = []string{"PATCH organization", "PATCH saved query", "POST saved query", "DELETE saved query"}

// timed sends one request and returns how long it took; it fails on another status than want.
func (bt *benchTarget) timed(b *testing.B, cl *http.Client, method, path string, body any, want int, out any) time.Duration {
	var rd io.Reader
	if body != nil {
		buf, _ := json.Marshal(body)
		rd = bytes.NewReader(buf)
	}
	req, _ := http.NewRequest(method, bt.p.api+path, rd)
	req.Header.Set("Authorization", "Bearer "+bt.key)
	req.Header.Set("Content-Type", "application/json")
	began := time.Now()
	resp, err := cl.Do(req)
	if err != nil {
		b.Fatalf("%s %s on %s: %v", method, path, bt.name, err)
	}
	data, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	took := time.Since(began)
	if resp.StatusCode != want {
		b.Fatalf("%s %s on %s: %d %s", method, path, bt.name, resp.StatusCode, data)
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			b.Fatal(err)
		}
	}
	return took
}

// iteration runs the writes once (seq makes the values new).
func (bt *benchTarget) iteration(b *testing.B, cl *http.Client, seq int) {
	v := strconv.Itoa(seq)
	bt.lat[benchWriteOps[0]] = append(bt.lat[benchWriteOps[0]], bt.timed(b, cl, http.MethodPatch, "/v1/organizations/"+bt.org, map[string]any{"name": "bench " + v}, http.StatusOK, nil))
	bt.lat[benchWriteOps[1]] = append(bt.lat[benchWriteOps[1]], bt.timed(b, cl, http.MethodPatch, "/v1/projects/"+bt.prj+"/saved-queries/"+bt.sqID, map[string]any{"sql": "SELECT " + v}, http.StatusOK, nil))
	var created struct {
		SavedQuery struct {
			ID string `json:"id"`
		} `json:"saved_query"`
	}
	bt.lat[benchWriteOps[2]] = append(bt.lat[benchWriteOps[2]], bt.timed(b, cl, http.MethodPost, "/v1/projects/"+bt.prj+"/saved-queries", map[string]any{"name": "bench " + bt.name + " " + v, "sql": "SELECT 1"}, http.StatusCreated, &created))
	bt.lat[benchWriteOps[3]] = append(bt.lat[benchWriteOps[3]], bt.timed(b, cl, http.MethodDelete, "/v1/projects/"+bt.prj+"/saved-queries/"+created.SavedQuery.ID, nil, http.StatusOK, nil))
}

// benchPct is the nearest-rank percentile of d (sorted in place).
func benchPct(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	i := int(float64(len(d))*p+0.999999) - 1
	return d[max(0, min(i, len(d)-1))]
}

func benchMs(d time.Duration) string { return fmt.Sprintf("%.2f", float64(d.Microseconds())/1000) }

// benchBoot is the organization of the appliance's bootstrap.json.
func benchBoot(b testing.TB, dataDir string) string {
	var boot struct {
		OrganizationID string `json:"organization_id"`
	}
	raw, _ := os.ReadFile(filepath.Join(dataDir, "bootstrap.json"))
	if err := json.Unmarshal(raw, &boot); err != nil || boot.OrganizationID == "" {
		b.Fatalf("bootstrap.json: %v", err)
	}
	return boot.OrganizationID
}

// BenchmarkClusterAPIWrites: the same API writes (benchWriteOps), one at a time, against a single-node
// appliance (bbolt) and a cluster of three (etcd) through a follower's API and through the leader's,
// BENCH_CLUSTER_ITERATIONS (default 100) iterations a target a round, the targets' order turned each of
// BENCH_CLUSTER_ROUNDS (default 3) rounds; p50 and p99 by target and operation, and the ratios to the
// single node. With BENCH_CLUSTER_BASE_BIN (a binary built from another commit: a before/after) a second
// cluster of three of it is written to in the same rounds ("base follower", "base leader"). Then the reference: etcd's own put latency on the same cluster of three (the appliance's
// embedded members, the same TLS and the node's client certificate), from a loop of clientv3 Put
// (sequential, and 50 in flight), and from etcd's `benchmark put` when BENCH_ETCD_BENCHMARK names its
// binary (go.etcd.io/etcd/v3/tools/benchmark; see bench/README.md for how it was built here).
//
//	go test ./acceptance/ -run '^$' -bench ClusterAPIWrites -benchtime 1x -timeout 30m
func BenchmarkClusterAPIWrites(b *testing.B) {
	iters := benchEnvInt(b, "BENCH_CLUSTER_ITERATIONS", 100)
	rounds := benchEnvInt(b, "BENCH_CLUSTER_ROUNDS", 3)
	b.Logf("load average before: %s", benchLoad())
	bin := e2eBuild(b)
	flags := []string{"--spare-clusters", "0"}

	// The single node, and node 1 of the cluster before it is one: a project (its saved queries) each.
	setup := func(bin, dir, name string) (*e2eProc, *benchTarget) {
		p := e2eStartWith(b, bin, dir, nil, flags)
		bt := &benchTarget{name: name, key: e2eAdminKey(b, dir), org: benchBoot(b, dir), lat: map[string][]time.Duration{}}
		bt.prj = p.e2eProvision(b, bt.key, "bench "+name)
		var v struct {
			SavedQuery struct {
				ID string `json:"id"`
			} `json:"saved_query"`
		}
		p.do(b, bt.key, http.MethodPost, "/v1/projects/"+bt.prj+"/saved-queries", map[string]any{"name": "patched", "sql": "SELECT 0"}, http.StatusCreated, &v)
		bt.sqID = v.SavedQuery.ID
		return p, bt
	}
	singleDir := appliancetest.TraversableTempDir(b)
	b.Cleanup(func() { e2eKillUnder(b, singleDir) })
	sp, single := setup(bin, singleDir, "single")
	single.p = sp
	// clusterTargets makes a cluster of three of the binary and returns its follower and leader targets.
	clusterTargets := func(bin, prefix string) (dirs []string, follower, lead int, ts []*benchTarget) {
		dirs = make([]string, 3)
		for i := range dirs {
			dirs[i] = appliancetest.TraversableTempDir(b)
			d := dirs[i]
			b.Cleanup(func() { e2eKillUnder(b, d) })
		}
		p1, first := setup(bin, dirs[0], prefix+"cluster")
		p1.stop(b, syscall.SIGTERM)
		procs := clusterOfThree(b, bin, dirs, nil, flags, nil)
		nodes := clusterNodes(b, bin, dirs[0])
		lead = clusterLeader(b, procs[0], nodes)
		if lead < 0 {
			b.Fatal("no leader")
		}
		follower = (lead + 1) % 3
		b.Logf("%scluster: leader node %d; follower written to: node %d", prefix, lead+1, follower+1)
		for _, c := range []struct {
			name string
			node int
		}{{prefix + "follower", follower}, {prefix + "leader", lead}} {
			bt := *first
			bt.name, bt.p, bt.lat = c.name, procs[c.node], map[string][]time.Duration{}
			ts = append(ts, &bt)
		}
		return dirs, follower, lead, ts
	}
	dirs, follower, lead, ts := clusterTargets(bin, "")
	targets := append([]*benchTarget{single}, ts...)
	// Another build's cluster beside this one's (a before/after of a change, alternating with the rest).
	if base := os.Getenv("BENCH_CLUSTER_BASE_BIN"); base != "" {
		_, _, _, ts := clusterTargets(base, "base ")
		targets = append(targets, ts...)
	}

	for range b.N {
		clients := map[*benchTarget]*http.Client{}
		for _, bt := range targets {
			clients[bt] = &http.Client{Timeout: time.Minute, Transport: bt.p.client.Transport}
			bt.iteration(b, clients[bt], 0) // a connection, warm
			for k := range bt.lat {
				bt.lat[k] = nil
			}
		}
		seq := 1
		for r := range rounds {
			for i := range targets {
				bt := targets[(i+r)%len(targets)]
				for range iters {
					bt.iteration(b, clients[bt], seq)
					seq++
				}
			}
		}
	}

	var report strings.Builder
	fmt.Fprintf(&report, "\n| operation |")
	for _, bt := range targets {
		fmt.Fprintf(&report, " %s p50 / p99 |", bt.name)
	}
	for _, bt := range targets[1:] {
		fmt.Fprintf(&report, " %s/single p50 |", bt.name)
	}
	fmt.Fprintf(&report, "\n|---|%s\n", strings.Repeat("---|", 2*len(targets)-1))
	all := map[*benchTarget][]time.Duration{}
	row := func(name string, lat func(*benchTarget) []time.Duration) {
		p50 := make([]time.Duration, len(targets))
		fmt.Fprintf(&report, "| %s |", name)
		for i, bt := range targets {
			d := lat(bt)
			p50[i] = benchPct(d, 0.5)
			fmt.Fprintf(&report, " %s / %s |", benchMs(p50[i]), benchMs(benchPct(d, 0.99)))
		}
		for i := range targets[1:] {
			fmt.Fprintf(&report, " %.2f |", float64(p50[i+1])/float64(p50[0]))
		}
		fmt.Fprintf(&report, "\n")
	}
	for _, op := range benchWriteOps {
		row(op, func(bt *benchTarget) []time.Duration {
			all[bt] = append(all[bt], bt.lat[op]...)
			return bt.lat[op]
		})
	}
	row("all writes", func(bt *benchTarget) []time.Duration { return all[bt] })
	b.Logf("API write latency in ms (%d of each operation a target, %d rounds):%s", iters*rounds, rounds, &report)
	b.ReportMetric(float64(benchPct(all[targets[0]], 0.5).Microseconds())/1000, "single-p50-ms")
	b.ReportMetric(float64(benchPct(all[targets[1]], 0.5).Microseconds())/1000, "follower-p50-ms")
	b.ReportMetric(float64(benchPct(all[targets[2]], 0.5).Microseconds())/1000, "leader-p50-ms")

	// The reference: etcd's put on the same members.
	for _, c := range []struct {
		name string
		node int
	}{{"follower", follower}, {"leader", lead}} {
		cl, cfg, err := cluster.Dial(dirs[c.node])
		if err != nil {
			b.Fatal(err)
		}
		for _, inflight := range []int{1, 50} {
			lat := benchEtcdPuts(b, cl, 1000*max(1, inflight/10), inflight)
			b.Logf("clientv3 Put through the %s's member (%s), 256-byte values, %d in flight: p50 %s ms, p99 %s ms (%d puts)",
				c.name, cfg.ClientURL(), inflight, benchMs(benchPct(lat, 0.5)), benchMs(benchPct(lat, 0.99)), len(lat))
		}
		cl.Close()
		if tool := os.Getenv("BENCH_ETCD_BENCHMARK"); tool != "" {
			for _, clients := range []string{"1", "50"} {
				args := []string{"--endpoints", cfg.ClientURL(), "--cacert", filepath.Join(dirs[c.node], "ca", "ca.crt"),
					"--cert", filepath.Join(dirs[c.node], "etcd", "node.crt"), "--key", filepath.Join(dirs[c.node], "etcd", "node.key"),
					"--conns", clients, "--clients", clients, "put", "--key-size", "8", "--val-size", "256", "--total", strconv.Itoa(map[string]int{"1": 1000, "50": 5000}[clients])}
				out, err := exec.Command(tool, args...).CombinedOutput()
				if err != nil {
					b.Fatalf("%s %s: %v\n%s", tool, strings.Join(args, " "), err, out)
				}
				b.Logf("etcd benchmark put through the %s's member, --clients %s:\n%s", c.name, clients, benchEtcdSummary(string(out)))
			}
		}
	}
	b.Logf("load average after: %s", benchLoad())
}

// benchEtcdSummary keeps the summary and the percentiles of etcd's benchmark output.
func benchEtcdSummary(out string) string {
	var keep []string
	for _, l := range strings.Split(out, "\n") {
		l = strings.TrimSpace(l)
		if strings.HasPrefix(l, "Total:") || strings.HasPrefix(l, "Slowest:") || strings.HasPrefix(l, "Fastest:") ||
			strings.HasPrefix(l, "Average:") || strings.HasPrefix(l, "Requests/sec:") || strings.HasPrefix(l, "50% in") ||
			strings.HasPrefix(l, "90% in") || strings.HasPrefix(l, "99% in") || strings.HasPrefix(l, "99.9% in") {
			keep = append(keep, "  "+l)
		}
	}
	return strings.Join(keep, "\n")
}

// benchEtcdPuts puts n 256-byte values under /bench-etcd/ (a prefix the appliance does not use), inflight
// at a time, and returns each put's latency.
func benchEtcdPuts(b *testing.B, cl *clientv3.Client, n, inflight int) []time.Duration {
	val := strings.Repeat("v", 256)
	lat := make([]time.Duration, n)
	var wg sync.WaitGroup
	next := make(chan int)
	for range inflight {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				ctx, cancel := context.WithTimeout(b.Context(), time.Minute)
				began := time.Now()
				_, err := cl.Put(ctx, fmt.Sprintf("/bench-etcd/%08d", i%1000), val)
				lat[i] = time.Since(began)
				cancel()
				if err != nil {
					b.Error(err)
				}
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	return lat
}

// benchGet is a GET through p that tolerates failures (a node lost, a project moving): ok says whether
// it answered 200, and out holds the answer.
func benchGet(p *e2eProc, key, path string, out any) bool {
	req, _ := http.NewRequest(http.MethodGet, p.api+path, nil)
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := p.client.Do(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode == http.StatusOK && json.Unmarshal(data, out) == nil
}

// benchServes says whether the project answers its row count, n, over url (within a few seconds).
func benchServes(ctx context.Context, url string, n int64) bool {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return false
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return false
	}
	defer conn.Close(context.Background())
	var got int64
	return conn.QueryRow(ctx, "SELECT count(*) FROM bench_md5").Scan(&got) == nil && got == n
}

// BenchmarkNodeLossRestore: BENCH_LOSS_PROJECTS (default 5) projects of about BENCH_LOSS_MB (default 100)
// MiB of md5 text rows each on node 1 of three, each with a base backup in the bucket (the S3 server of
// the e2e tests), `up --node-loss-restore-after` BENCH_LOSS_AFTER (default 10s) on every node; node 1 is
// SIGKILLed with its instances, and the clock runs until each project answers a count of its rows over
// the direct_url the API gives for it then (on a survivor). Also timed from the kill: the project seen
// unavailable through node 2, its restore job's start and end (the job's own timestamps). The issue's
// goal: every project serving within the restore-after delay + 60 s.
//
//	go test ./acceptance/ -run '^$' -bench NodeLossRestore -benchtime 1x -timeout 60m
func BenchmarkNodeLossRestore(b *testing.B) {
	n := benchEnvInt(b, "BENCH_LOSS_PROJECTS", 5)
	sizeMB := benchEnvInt(b, "BENCH_LOSS_MB", 100)
	after := os.Getenv("BENCH_LOSS_AFTER")
	if after == "" {
		after = "10s"
	}
	afterD, err := time.ParseDuration(after)
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("load average before: %s", benchLoad())
	bk := e2eBucket(b)
	bin := e2eBuild(b)
	dirs := make([]string, 3)
	for i := range dirs {
		dirs[i] = appliancetest.TraversableTempDir(b)
		d := dirs[i]
		b.Cleanup(func() { e2eKillUnder(b, d) })
	}
	common := append(bk.flags(), "--node-loss-restore-after", after)
	node1Flags := append([]string{"--spare-clusters", "0"}, common...)
	a1 := e2eStartWith(b, bin, dirs[0], bk.env, node1Flags)
	key := e2eAdminKey(b, dirs[0])
	rows := int64(sizeMB) * (1 << 20) / 134 // about 134 bytes a row on disk (BenchmarkRecover's table)
	ids := make([]string, n)
	var dbMB float64
	tSetup := time.Now()
	for i := range ids {
		ids[i] = a1.e2eProvision(b, key, "loss bench "+strconv.Itoa(i))
		url := a1.connections(b, key, ids[i]).DirectURL
		dbMB += fillBenchTable(b, url, rows)
		bj := a1.call(b, key, http.MethodPost, "/v1/projects/"+ids[i]+"/backups", map[string]any{"label": "base"}, http.StatusAccepted)
		if j := waitJobFor(b, a1, key, bj.ID, 20*time.Minute); j.State != "completed" {
			b.Fatalf("backup of %s %s: %q\n%s", ids[i], j.State, j.Error, j.LastStderr)
		}
	}
	b.Logf("%d projects, %.0f MB of databases in all, %d md5 rows each, backed up in %.0f s", n, dbMB, rows, time.Since(tSetup).Seconds())
	a1.stop(b, syscall.SIGTERM)
	procs := clusterOfThree(b, bin, dirs, bk.env, node1Flags, common)
	a2 := procs[1]
	for _, id := range ids {
		e2eEventually(b, 3*time.Minute, "project "+id+" active through node 2", func() (bool, string) {
			var v struct {
				Project e2eProject `json:"project"`
			}
			ok := benchGet(a2, key, "/v1/projects/"+id, &v)
			return ok && v.Project.RuntimeStatus == "active", v.Project.RuntimeStatus
		})
	}
	nodes := clusterNodes(b, bin, dirs[1])

	for range b.N {
		type marks struct{ unavailable, jobStarted, jobDone, serving time.Duration }
		got := make([]marks, n)
		b.Logf("load average at the kill: %s", benchLoad())
		lost := time.Now()
		procs[0].cmd.Process.Signal(syscall.SIGKILL)
		procs[0].waitExit(b)
		e2eKillUnder(b, dirs[0])
		// One watcher a project, so that a slow attempt on one delays no other's mark.
		deadline := lost.Add(afterD + 10*time.Minute)
		var wg sync.WaitGroup
		for i, id := range ids {
			m := &got[i]
			wg.Add(1)
			go func() {
				defer wg.Done()
				for ; m.serving == 0; time.Sleep(100 * time.Millisecond) {
					if time.Now().After(deadline) {
						b.Errorf("project %s not serving %v after the kill: %+v", id, time.Since(lost), *m)
						return
					}
					var v struct {
						Project struct {
							e2eProject
							LatestJobID string `json:"latest_job_id"`
						} `json:"project"`
					}
					if !benchGet(a2, key, "/v1/projects/"+id, &v) {
						continue
					}
					if m.unavailable == 0 && v.Project.RuntimeStatus == "unavailable" {
						m.unavailable = time.Since(lost)
					}
					if v.Project.RuntimeStatus != "active" || m.unavailable == 0 {
						continue
					}
					var c struct {
						Connections e2eConnections `json:"connections"`
					}
					if !benchGet(a2, key, "/v1/projects/"+id+"/connections", &c) || !benchServes(b.Context(), c.Connections.DirectURL, rows) {
						continue
					}
					m.serving = time.Since(lost)
					var j struct {
						Job struct {
							Type        string     `json:"type"`
							State       string     `json:"state"`
							Result      any        `json:"result"`
							StartedAt   *time.Time `json:"started_at"`
							CompletedAt *time.Time `json:"completed_at"`
						} `json:"job"`
					}
					if benchGet(a2, key, "/v1/jobs/"+v.Project.LatestJobID, &j) && j.Job.StartedAt != nil && j.Job.CompletedAt != nil {
						m.jobStarted, m.jobDone = j.Job.StartedAt.Sub(lost), j.Job.CompletedAt.Sub(lost)
						b.Logf("project %s: job %s %s %v", id, j.Job.Type, j.Job.State, j.Job.Result)
					}
				}
			}()
		}
		wg.Wait()
		if b.Failed() {
			b.FailNow()
		}
		var report strings.Builder
		fmt.Fprintf(&report, "\n| project | unavailable | restore job started | restore job done | serving (count of its rows) |\n|---|---|---|---|---|\n")
		var last time.Duration
		for i, m := range got {
			fmt.Fprintf(&report, "| %d | %.1f s | %.1f s | %.1f s | %.1f s |\n", i+1, m.unavailable.Seconds(), m.jobStarted.Seconds(), m.jobDone.Seconds(), m.serving.Seconds())
			last = max(last, m.serving)
		}
		b.Logf("from node 1's SIGKILL (restore after %s; node ids %s %s %s):%s\nall %d serving %.1f s after the kill = restore-after %s + %.1f s",
			after, nodes[0].ID, nodes[1].ID, nodes[2].ID, &report, n, last.Seconds(), after, (last - afterD).Seconds())
		b.ReportMetric(last.Seconds(), "s-all-serving")
		b.ReportMetric((last - afterD).Seconds(), "s-beyond-restore-after")
	}
	b.Logf("load average after: %s", benchLoad())
}
