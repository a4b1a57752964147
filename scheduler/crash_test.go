package scheduler

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/theappliance/appliance/appliance/cluster/lease"
	"github.com/theappliance/appliance/store"
)

// The environment with which the test binary runs as a node of its own (TestMain): a process the test
// kills with SIGKILL, as a machine's loss would end it.
const (
	helperNodeEnv      = "APPLIANCE_SCHEDULER_TEST_NODE"      // the node's id
	helperEndpointsEnv = "APPLIANCE_SCHEDULER_TEST_ENDPOINTS" // etcd's client URLs, comma-separated
	helperPrefixEnv    = "APPLIANCE_SCHEDULER_TEST_PREFIX"
)

func TestMain(m *testing.M) {
	if os.Getenv(helperNodeEnv) != "" {
		os.Exit(helperNode())
	}
	os.Exit(m.Run())
}

// helperNode is a node in a process of its own: it runs "hang" jobs (printing "running <id>") until it
// is killed.
func helperNode() int {
	fail := func(err error) int { fmt.Fprintln(os.Stderr, "helper node:", err); return 1 }
	node, prefix := os.Getenv(helperNodeEnv), os.Getenv(helperPrefixEnv)
	cl, err := clientv3.New(clientv3.Config{Endpoints: strings.Split(os.Getenv(helperEndpointsEnv), ","), DialTimeout: 10 * time.Second})
	if err != nil {
		return fail(err)
	}
	db, err := store.OpenEtcd(cl, prefix+"meta/")
	if err != nil {
		return fail(err)
	}
	m, err := lease.NewEtcd(lease.Config{Client: cl, Prefix: prefix, Node: node, TTL: clusterTTL})
	if err != nil {
		return fail(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if err := m.Start(ctx); err != nil {
		return fail(err)
	}
	r := New(db, Options{ID: node + "/helper", Members: m, Poll: 20 * time.Millisecond})
	r.Handle("hang", func(ctx context.Context, run *Run) (any, error) {
		fmt.Printf("running %s\n", run.Job.ID)
		<-ctx.Done()
		return nil, ctx.Err()
	})
	if err := r.Start(ctx); err != nil {
		return fail(err)
	}
	fmt.Println("ready")
	select {}
}

// TestClusterJobOfKilledNodeRetried: a node's process is killed (SIGKILL) while its job runs; once its
// lease lapses the live nodes put the job back to pending, the error naming the lost node, and one of them
// runs it to completion.
func TestClusterJobOfKilledNodeRetried(t *testing.T) {
	c := startEtcd(t)
	const prefix = "/t-killed/"
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), helperNodeEnv+"=doomed", helperEndpointsEnv+"="+strings.Join(c.Endpoints(), ","), helperPrefixEnv+"="+prefix)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	lines := make(chan string, 10)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	if l := recvCluster(t, lines, "the helper node to be ready"); l != "ready" {
		t.Fatalf("helper said %q", l)
	}

	cl, err := c.Client()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	db, err := store.OpenEtcd(cl, prefix+"meta/")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	id := enqueue(t, db, nil, &store.Job{Type: "hang"})
	if l := recvCluster(t, lines, "the helper node to run the job"); l != "running "+id {
		t.Fatalf("helper said %q", l)
	}
	if j := getJob(t, db, id); j.State != StateRunning || j.HostID != "doomed" || j.Lease == "" {
		t.Fatalf("job %+v", j)
	}
	killed := time.Now()
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()

	runs := newOverlap()
	seen := make(chan store.Job, 4)
	register := func(node string) func(*Runner) {
		return func(r *Runner) {
			r.Handle("hang", func(ctx context.Context, run *Run) (any, error) {
				runs.enter(run.Job.ID, node)
				defer runs.leave(run.Job.ID)
				seen <- run.Job
				return "done on " + node, nil
			})
		}
	}
	joinNode(t, c, 0, "n1", prefix, register("n1"))
	joinNode(t, c, 1, "n2", prefix, register("n2"))
	retry := recvCluster(t, seen, "the retry on a live node")
	t.Logf("the job ran again on %s %s after the kill (lease TTL %s)", retry.HostID, time.Since(killed).Round(time.Millisecond), clusterTTL)
	if retry.Attempts != 2 || retry.Error != fmt.Sprintf(msgNodeLost, "doomed") {
		t.Fatalf("retry at attempt %d with error %q", retry.Attempts, retry.Error)
	}
	j := waitFinalCluster(t, db, id)
	if j.State != StateCompleted || (j.HostID != "n1" && j.HostID != "n2") || j.Attempts != 2 {
		t.Fatalf("job %+v", j)
	}
	runs.check(t)
}
