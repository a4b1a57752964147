package appliance

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestRecoveryProgressRecord: the record of a recovery reads back as written after each change (a rerun
// starts from the file alone), counts its runs, is done only when every project is restored, and once
// removed (or never written) is no recovery under way; a file that is not a record of recover's is an
// error, not a fresh start.
func TestRecoveryProgressRecord(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	if _, err := LoadRecoveryProgress(dir); !errors.Is(err, ErrNoRecoveryProgress) {
		t.Fatalf("no record: %v, want ErrNoRecoveryProgress", err)
	}
	created := time.Date(2026, 11, 27, 5, 0, 0, 0, time.UTC)
	p, err := NewRecoveryProgress(dir, "s3://b/appl", "20261127T050000.000000000Z", created, 42, created.Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.SetMetadataInstalled(); err != nil {
		t.Fatal(err)
	}
	if p.Done() {
		t.Fatal("done before reconcile")
	}
	if err := p.setProjects([]ProjectRecovery{{ID: "prj_a", Name: "a", State: RecoveryPending, Notes: []string{"direct port 1 → 2"}},
		{ID: "prj_b", Name: "b", State: RecoveryPending}}); err != nil {
		t.Fatal(err)
	}
	at := created.Add(2 * time.Minute)
	if err := p.setProject(ProjectRecovery{ID: "prj_a", Name: "a", State: RecoveryRestored, BackupKey: "k", LSN: "0/6000000", At: &at, Timeline: 2}); err != nil {
		t.Fatal(err)
	}
	if err := p.setProject(ProjectRecovery{ID: "prj_b", Name: "b", State: RecoveryFailed, Error: "no backup"}); err != nil {
		t.Fatal(err)
	}

	q, err := LoadRecoveryProgress(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := q.NewRun(); err != nil {
		t.Fatal(err)
	}
	id, gotCreated, gen := q.Snapshot()
	if id != "20261127T050000.000000000Z" || !gotCreated.Equal(created) || gen != 42 || q.BackupStore() != "s3://b/appl" || !q.MetadataInstalled() || !q.reconciled() || q.Runs() != 2 {
		t.Fatalf("read back: snapshot %s %s %d, store %s, installed %v, reconciled %v, runs %d", id, gotCreated, gen, q.BackupStore(), q.MetadataInstalled(), q.reconciled(), q.Runs())
	}
	ps := q.Projects()
	if len(ps) != 2 || ps[0].State != RecoveryRestored || ps[0].LSN != "0/6000000" || ps[0].At == nil || !ps[0].At.Equal(at) || ps[0].Timeline != 2 ||
		ps[1].State != RecoveryFailed || ps[1].Error != "no backup" {
		t.Fatalf("projects read back: %+v", ps)
	}
	if n := q.Counts(); n[RecoveryRestored] != 1 || n[RecoveryFailed] != 1 || n[RecoveryPending] != 0 || q.Done() {
		t.Fatalf("counts %v, done %v", n, q.Done())
	}
	ps[1].State = RecoveryRestored
	if err := q.setProject(ps[1]); err != nil {
		t.Fatal(err)
	}
	if !q.Done() {
		t.Fatal("not done with every project restored")
	}
	if err := q.Remove(); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadRecoveryProgress(dir); !errors.Is(err, ErrNoRecoveryProgress) {
		t.Fatalf("after Remove: %v, want ErrNoRecoveryProgress", err)
	}
	for _, garbage := range []string{"{}", "not json", `{"version": 2, "snapshot": "x"}`} {
		if err := os.WriteFile(filepath.Join(dir, RecoveryProgressFile), []byte(garbage), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := LoadRecoveryProgress(dir); err == nil || errors.Is(err, ErrNoRecoveryProgress) {
			t.Fatalf("record %q: %v, want an error", garbage, err)
		}
	}
}
