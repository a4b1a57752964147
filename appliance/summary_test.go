package appliance_test

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance"
	"github.com/theappliance/appliance/store"
)

// TestProjectSummary: the home's read before any sample, then with samples (CPU and memory points), a
// storage alert and a backup; the newest backup only with backups:read; the list counts the alerts.
func TestProjectSummary(t *testing.T) {
	t.Parallel()
	e, p := realEnv(t)
	prj := provision(t, e, p, "home", "development")
	var mu sync.Mutex
	now := time.Now().UTC()
	e.Clock.Set(func() time.Time { mu.Lock(); defer mu.Unlock(); return now })
	sweep := func() {
		t.Helper()
		mu.Lock()
		now = now.Add(time.Minute)
		mu.Unlock()
		if res, err := e.Svc.Observe().Sample(t.Context()); err != nil || res.Failed != 0 || res.Projects != 1 {
			t.Fatalf("sweep: %+v %v", res, err)
		}
	}
	summary := func(p *appliance.Principal) *api.ProjectSummary {
		t.Helper()
		r, err := e.Svc.Observe().Summary(t.Context(), p, prj.ID)
		if err != nil {
			t.Fatal(err)
		}
		return r.Summary
	}

	s := summary(p)
	if s.SampledAt != nil || len(s.Usage) != 0 || s.LastBackup != nil || len(s.OpenAlerts) != 0 ||
		s.StorageLimitBytes != prj.StorageLimitBytes || s.ConnectionLimit != int64(prj.MaxConnections) || s.MemLimitBytes <= 0 || s.CPUQuotaCores <= 0 {
		t.Fatalf("before any sample: %+v", s)
	}

	// The storage limit just above the database's size: 88 %, a warning on the next sample.
	var size int64
	if err := e.Svc.AdminQueryRow(t.Context(), prj.ID, "SELECT pg_database_size(current_database())", nil, &size); err != nil {
		t.Fatal(err)
	}
	if err := e.DB.Update(func(tx *store.Tx) error {
		x, err := store.Projects.Get(tx, prj.ID)
		if err != nil {
			return err
		}
		x.StorageLimitBytes = size * 100 / 88
		return store.Projects.Put(tx, x)
	}); err != nil {
		t.Fatal(err)
	}
	sweep() // the baseline
	sweep()
	sweep()
	res, err := e.Svc.Backups().Create(t.Context(), p, prj.ID, &appliance.CreateBackupRequest{Label: "home"})
	j := runJob(t, e, res, err)

	s = summary(p)
	if s.SampledAt == nil || !s.SampledAt.Equal(now) || s.StorageBytes < size || s.StorageLimitBytes != size*100/88 || s.Connections < 0 {
		t.Fatalf("after the samples: %+v", s)
	}
	if len(s.Usage) != 2 || !slices.ContainsFunc(s.Usage, func(u api.UsagePoint) bool { return u.MemUsageBytes > 0 }) {
		t.Fatalf("CPU and memory points: %+v", s.Usage)
	}
	if len(s.OpenAlerts) != 1 || s.OpenAlerts[0].Kind != "storage" || s.OpenAlerts[0].ResolvedAt != nil {
		t.Fatalf("alerts in force: %+v", s.OpenAlerts)
	}
	if b := s.LastBackup; b == nil || b.Label != "home" || b.State != api.BackupCompleted || b.SizeBytes <= 0 {
		t.Fatalf("newest backup (job %s): %+v", j.ID, b)
	}

	// Without backups:read the backup is left out; the rest stays.
	narrow := *p
	narrow.Scopes = slices.DeleteFunc(slices.Clone(p.Scopes), func(s string) bool { return s == string(api.ScopeBackupsRead) })
	if s := summary(&narrow); s.LastBackup != nil || len(s.OpenAlerts) != 1 {
		t.Fatalf("without backups:read: %+v", s)
	}

	list, err := e.Svc.ListProjects(t.Context(), p, "")
	if err != nil {
		t.Fatal(err)
	}
	if list.OpenAlerts[prj.ID] != 1 || len(list.OpenAlerts) != 1 {
		t.Fatalf("the list's alert counts: %+v", list.OpenAlerts)
	}
}
