package acceptance

import (
	"strings"
	"testing"
	"time"
)

// clusterHosts are the loopback addresses the three nodes of a test cluster advertise.
var clusterHosts = []string{"127.0.0.1", "127.0.0.2", "127.0.0.3"}

// clusterOfThree makes a cluster of the stopped single-node appliance on dirs[0] (cluster init,
// advertising 127.0.0.1), starts it with node1Flags, and joins the appliances on dirs[1] and dirs[2]
// (127.0.0.2 and .3) to it with join tokens, each with joinFlags besides clusterFlags; env is every
// node's environment. It returns the three nodes, running.
func clusterOfThree(t testing.TB, bin string, dirs, env, node1Flags, joinFlags []string) []*e2eProc {
	t.Helper()
	runCLI(t, bin, append([]string{"cluster", "init", "--data-dir", dirs[0], "--advertise", clusterHosts[0]}, e2eNodePortFlags(t, dirs[0])...)...)
	procs := []*e2eProc{e2eStartWith(t, bin, dirs[0], env, node1Flags)}
	for i, host := range clusterHosts[1:] {
		tok := strings.TrimSpace(runCLI(t, bin, "cluster", "join-token", "--data-dir", dirs[0], "--ttl", "10m"))
		procs = append(procs, e2eStartWith(t, bin, dirs[i+1], env, append(append(clusterFlags(t, host, dirs[i+1]), joinFlags...), "--join", tok)))
	}
	return procs
}

// clusterLeader is the index in nodes of the node whose etcd member leads, as p's /status says (-1: none).
func clusterLeader(t testing.TB, p *e2eProc, nodes []clusterNode) int {
	t.Helper()
	st := p.clusterStatus(t)
	for _, m := range st.Cluster.Members {
		if !m.Leader {
			continue
		}
		for i, n := range nodes {
			if m.Name == "appliance-"+n.ID {
				return i
			}
		}
	}
	return -1
}

// clusterPoll is how often the waits of the cluster tests ask a cluster (an API request, whose answer
// reads etcd) or scan /proc: e2eEventually's 20 ms polls cost more CPU than the wait itself there, and
// the states waited for last seconds.
const clusterPoll = 250 * time.Millisecond

// pollEvery is e2eEventually polling cond every interval instead of every 20 ms.
func pollEvery(t testing.TB, within, interval time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(within)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		ok, detail := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s; last: %s", within, what, detail)
		}
		<-tick.C
	}
}
