package pgstat

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/theappliance/appliance/appliance/postgres"
	"github.com/theappliance/appliance/appliance/postgres/pgtest"
)

// TestMemoryRolls: a Memory reads each process's PSS when it first sees it and then once every Every
// calls, carries the readings in between, reads a process again whose pid was reused, and forgets a
// process that exited.
func TestMemoryRolls(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := pgtest.Start(t, postgres.Settings{})
	pm, err := PostmasterPID(s.Instance.DataDir())
	if err != nil {
		t.Fatal(err)
	}
	measure := func(m *Memory) Usage {
		t.Helper()
		u, err := Measure(pm, m)
		if err != nil || u.MemBytes <= 0 {
			t.Fatalf("Measure: %+v %v", u, err)
		}
		return u
	}

	every := &Memory{}
	for range 3 {
		measure(every)
		if every.Read() != len(every.procs) || every.Read() < 5 {
			t.Fatalf("Memory{} read %d of %d processes", every.Read(), len(every.procs))
		}
	}

	m := &Memory{Every: 5}
	measure(m)
	if n := len(m.procs); m.Read() != n || n < 5 {
		t.Fatalf("the first call read %d of %d processes", m.Read(), n)
	}
	first := map[int]bool{}
	for pid := range m.procs {
		first[pid] = true
	}
	reads := 0
	for range 10 {
		measure(m)
		reads += m.Read()
		for pid, r := range m.procs {
			if m.calls-r.read >= uint64(m.Every) {
				t.Errorf("call %d: process %d last read at call %d", m.calls, pid, r.read)
			}
		}
	}
	// Two rounds of Every calls: each process seen throughout is read twice (others came and went, e.g.
	// autovacuum workers: read when first seen).
	stayed := 0
	for pid := range m.procs {
		if first[pid] {
			stayed++
		}
	}
	if reads < 2*stayed || reads > 2*len(first)+10 {
		t.Errorf("10 calls read %d processes; %d of %d stayed throughout", reads, stayed, len(first))
	}

	// A new session's backend is read by the next call; once it exited, it is forgotten.
	_, _, tenant := s.Tenant(t)
	backend := int(tenant.PgConn().PID())
	measure(m)
	if r, ok := m.procs[backend]; !ok || r.read != m.calls || r.bytes <= 0 {
		t.Fatalf("a new backend: %+v %v (call %d)", r, ok, m.calls)
	}
	tenant.Close(ctx)
	pgtest.WaitFor(t, 10*time.Second, func() (bool, string) {
		_, err := os.Stat(fmt.Sprintf("/proc/%d", backend))
		return err != nil, "the backend has not exited"
	})
	measure(m)
	if _, ok := m.procs[backend]; ok {
		t.Error("a backend that exited is still carried")
	}

	// A pid now naming another process (another start time) is read again, whatever its phase.
	for pid, r := range m.procs {
		if (m.calls+1+uint64(pid))%uint64(m.Every) == 0 {
			continue // due anyway
		}
		r.start++
		m.procs[pid] = r
		measure(m)
		if got := m.procs[pid]; got.read != m.calls || got.start == r.start {
			t.Errorf("a reused pid %d was not read again: %+v", pid, got)
		}
		break
	}
}
