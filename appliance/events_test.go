package appliance_test

import (
	"strings"
	"testing"
	"time"

	"github.com/theappliance/appliance/appliance"
	"github.com/theappliance/appliance/appliance/eventlog"
	"github.com/theappliance/appliance/store"
)

func projectEvents(t *testing.T, e interface {
	View(func(*store.Tx) error) error
}, projectID string) []*store.Event {
	t.Helper()
	var out []*store.Event
	if err := e.View(func(tx *store.Tx) (err error) {
		out, err = store.Events.Lookup(tx, store.EventsByProject, projectID, store.Query{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestJobEndsAreLogged: a job's end appends job.completed (and what it means: project.ready, …) in the
// transaction that records it, in order; a failed job appends job.failed; old events are swept.
func TestJobEndsAreLogged(t *testing.T) {
	t.Parallel()
	e, p := realEnv(t)
	prj := provision(t, e, p, "logged", "development")
	res, err := e.Svc.Backups().Create(t.Context(), p, prj.ID, &appliance.CreateBackupRequest{})
	runJob(t, e, res, err)
	var types []string
	var last uint64
	for _, ev := range projectEvents(t, e.DB, prj.ID) {
		types = append(types, ev.Type)
		if ev.Seq <= last {
			t.Errorf("events out of order: %d after %d", ev.Seq, last)
		}
		last = ev.Seq
	}
	if got := strings.Join(types, " "); got != "job.completed project.ready job.completed backup.completed" {
		t.Fatalf("events %q", got)
	}
	evs := projectEvents(t, e.DB, prj.ID)
	if !strings.Contains(string(evs[1].Data), `"type":"project.provision"`) || evs[1].OrganizationID != prj.OrganizationID {
		t.Errorf("project.ready data: %s", evs[1].Data)
	}
	// After the retention, the sweep deletes them.
	e.Clock.Set(func() time.Time { return time.Now().Add(eventlog.Retention + time.Hour) })
	if n, err := e.Svc.Events().Sweep(t.Context()); err != nil || n < 4 {
		t.Fatalf("sweep: %d %v", n, err)
	}
	if left := projectEvents(t, e.DB, prj.ID); len(left) != 0 {
		t.Errorf("%d events left after the retention", len(left))
	}
}
