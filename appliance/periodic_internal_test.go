package appliance

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/theappliance/appliance/appliance/backup"
	"github.com/theappliance/appliance/appliance/billing"
	"github.com/theappliance/appliance/scheduler"
	"github.com/theappliance/appliance/store"
)

// TestPeriodicTasks: the service's periodic tasks are those up ran, on the same intervals and in the same
// order, and the runner takes every one of them.
func TestPeriodicTasks(t *testing.T) {
	db, err := store.Open(filepath.Join(t.TempDir(), "meta.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.RerunUpdates(os.Getenv(store.RerunUpdatesEnv) == "1")
	s := New(Config{}, Deps{DB: db, Log: slog.New(slog.DiscardHandler)})
	var got []string
	for _, task := range s.periodic() {
		if task.run == nil {
			t.Errorf("%s has nothing to run", task.name)
		}
		got = append(got, fmt.Sprintf("%s %s", task.spec, task.name))
	}
	want := []string{"@every 1m expiry-sweep", "@every 1m scheduled-backups", "@every 1h storage-history",
		"@every 1m observability-sampler", "@every 1h observability-housekeeping", "@every 1h server-log-housekeeping",
		"@every 30s spare-clusters", "@every 30s kv-snapshots", "@every 30s suspend-idle", "@every 1h integration-events"}
	if !slices.Equal(got, want) {
		t.Errorf("periodic tasks:\n got %q\nwant %q", got, want)
	}
	// In a cluster, the work on a node's own processes and files runs on every node; the rest once, on
	// the leader.
	var perNode []string
	for _, task := range s.periodic() {
		if nodeTasks[task.name] {
			perNode = append(perNode, task.name)
		}
	}
	if want := []string{"observability-sampler", "server-log-housekeeping", "spare-clusters", "kv-snapshots", "suspend-idle"}; !slices.Equal(perNode, want) {
		t.Errorf("tasks on every node: %q, want %q", perNode, want)
	}
	if err := s.RegisterPeriodic(scheduler.New(db, scheduler.Options{})); err != nil {
		t.Fatal(err)
	}
	// With a bucket, its abandoned uploads are swept hourly.
	sw := &sweepingObjects{}
	s = New(Config{}, Deps{DB: db, Log: slog.New(slog.DiscardHandler), BackupObjects: sw})
	tasks := s.periodic()
	if last := tasks[len(tasks)-1]; len(tasks) != len(want)+1 || last.spec+" "+last.name != "@every 1h backup-store-uploads" {
		t.Errorf("with a bucket, the tasks end with %s %s (%d tasks)", last.spec, last.name, len(tasks))
	} else if last.run(t.Context()); sw.swept != 1 {
		t.Errorf("the task swept %d times", sw.swept)
	}
	// With --verify-backups-every, the restore tests come last (looking hourly for what is due).
	s = New(Config{VerifyBackupsEvery: DefaultVerifyBackupsEvery}, Deps{DB: db, Log: slog.New(slog.DiscardHandler)})
	tasks = s.periodic()
	if last := tasks[len(tasks)-1]; len(tasks) != len(want)+1 || last.spec+" "+last.name != "@every 1h verify-backups" {
		t.Errorf("with VerifyBackupsEvery, the tasks end with %s %s (%d tasks)", last.spec, last.name, len(tasks))
	}
	// With a billing provider, the customers Stripe could not be reached for and the sweep of received
	// events every 10 minutes.
	p, err := billing.NewStripe(billing.StripeConfig{SecretKey: "sk_test_x", WebhookSecret: "whsec_x", URL: "http://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	s = New(Config{}, Deps{DB: db, Log: slog.New(slog.DiscardHandler), Billing: p})
	tasks = s.periodic()
	// and the referrals' rewards the provider could not be reached for, every 5 minutes.
	if n := len(tasks); n != len(want)+2 || tasks[n-2].spec+" "+tasks[n-2].name != "@every 10m billing" ||
		tasks[n-1].spec+" "+tasks[n-1].name != "@every 5m referral-rewards" {
		t.Errorf("with billing, the tasks end with %s %s, %s %s (%d tasks)", tasks[n-2].spec, tasks[n-2].name, tasks[n-1].spec, tasks[n-1].name, n)
	}
}

// sweepingObjects is a backup store with uploads to sweep (as s3store.Bucket).
type sweepingObjects struct {
	backup.Objects
	swept int
}

func (o *sweepingObjects) SweepUploads(context.Context) (int, error) { o.swept++; return 0, nil }
