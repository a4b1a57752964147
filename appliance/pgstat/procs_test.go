package pgstat_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/theappliance/appliance/appliance/pgstat"
	"github.com/theappliance/appliance/appliance/postgres/pgtest"
)

// testProcs: the instance's processes use CPU and memory; the CPU time grows with work and does not go
// down when a backend exits.
func testProcs(t *testing.T, s *pgtest.Server) {
	ctx := context.Background()
	pid, err := pgstat.PostmasterPID(s.Instance.DataDir())
	if err != nil {
		t.Fatal(err)
	}
	if want, _, _ := s.Instance.Status(); pid != want {
		t.Fatalf("PostmasterPID %d, Status %d", pid, want)
	}
	usage := func() pgstat.Usage {
		p, err := pgstat.ReadProcs()
		if err != nil {
			t.Fatal(err)
		}
		return p.Usage(pid)
	}
	u1 := usage()
	if u1.CPUSeconds <= 0 || u1.MemBytes <= 0 {
		t.Errorf("a running instance: %+v", u1)
	}
	// Measure finds the same processes through the children files, without a scan of /proc: its CPU time
	// lies between two scans' taken just before and after it (other subtests' sessions come and go on this
	// server meanwhile: a few tries until nothing moved in between).
	pgtest.WaitFor(t, 10*time.Second, func() (bool, string) {
		before := usage()
		m, err := pgstat.Measure(pid, &pgstat.Memory{})
		after := usage()
		ok := err == nil && m.CPUSeconds >= before.CPUSeconds && m.CPUSeconds <= after.CPUSeconds && m.MemBytes > 0 &&
			after.CPUSeconds-before.CPUSeconds < 0.05
		return ok, fmt.Sprintf("Measure %+v (%v) is not between ReadProcs+Usage %+v and %+v", m, err, before, after)
	})
	if m, err := pgstat.Measure(pid, nil); err != nil || m.CPUSeconds <= 0 || m.MemBytes != 0 {
		t.Errorf("Measure without memory: %+v %v", m, err)
	}
	if m, err := pgstat.Measure(1<<30, &pgstat.Memory{}); err != nil || m != (pgstat.Usage{}) {
		t.Errorf("Measure of no process: %+v %v", m, err)
	}
	_, _, tenant := s.Tenant(t)
	backend := tenant.PgConn().PID()
	mustExec(t, tenant, "SELECT count(*) FROM generate_series(1, 3000000)")
	u2 := usage()
	if u2.CPUSeconds < u1.CPUSeconds+0.1 || u2.MemBytes <= 0 {
		t.Errorf("after a query of a few hundred ms: %+v, before %+v", u2, u1)
	}
	tenant.Close(ctx)
	pgtest.WaitFor(t, 10*time.Second, func() (bool, string) {
		_, err := os.Stat(fmt.Sprintf("/proc/%d", backend))
		return err != nil, "the backend has not exited"
	})
	if u3 := usage(); u3.CPUSeconds < u2.CPUSeconds {
		t.Errorf("the CPU time went down from %v to %v when a backend exited", u2.CPUSeconds, u3.CPUSeconds)
	}
	p, _ := pgstat.ReadProcs()
	if u := p.Usage(1 << 30); u != (pgstat.Usage{}) {
		t.Errorf("the usage of no process: %+v", u)
	}
	if _, err := pgstat.PostmasterPID(t.TempDir()); err == nil {
		t.Error("PostmasterPID without postmaster.pid")
	}
}
