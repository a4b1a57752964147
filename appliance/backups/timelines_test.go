package backups

import (
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/theappliance/appliance/appliance/backup"
	"github.com/theappliance/appliance/appliance/backup/dirstore"
)

// TestReplaceDeadTimelines, on a directory backup store: a switch from 1 to 3 drops the rebuild's switch
// to 2 (a dead branch, recorded with no archive named) and keeps the switches to timelines outside (1, 3)
// and those of another cluster's archive; a restore to a time after it reads timeline 3, before the dead
// switch timeline 1.
func TestReplaceDeadTimelines(t *testing.T) {
	ctx := t.Context()
	bs := backup.New(&dirstore.Dir{Root: filepath.Join(t.TempDir(), "store")})
	t0 := time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC)
	for _, sw := range []TimelineSwitch{
		{JobID: "restore-a", From: 0, To: 1, At: t0},
		{JobID: "upgrade-b", From: 1, To: 2, At: t0.Add(time.Minute), Archive: "pg16", FromArchive: ""},
		{JobID: "recover-prj-x", From: 1, To: 2, At: t0.Add(2 * time.Minute)},
	} {
		if err := AppendTimelineSwitch(ctx, bs, "prj_1", sw); err != nil {
			t.Fatal(err)
		}
	}
	sw := TimelineSwitch{JobID: "move-rollback-prj-y", From: 1, To: 3, At: t0.Add(3 * time.Minute)}
	if err := ReplaceDeadTimelines(ctx, bs, "prj_1", sw); err != nil {
		t.Fatal(err)
	}
	all, err := readTimelineSwitches(ctx, bs, "prj_1")
	if err != nil {
		t.Fatal(err)
	}
	var jobs []string
	for _, s := range all {
		jobs = append(jobs, s.JobID)
	}
	if want := []string{"restore-a", "upgrade-b", "move-rollback-prj-y"}; !slices.Equal(jobs, want) {
		t.Fatalf("switches after the move's: %v, want %v", jobs, want)
	}
	if tl, _ := timelineAt(all, t0.Add(150*time.Second), 1); tl != 2 { // the upgrade's cluster's (kept)
		t.Fatalf("timeline between the upgrade and the move's switch: %d, want 2", tl)
	}
	if tl, _ := timelineAt(all, t0.Add(4*time.Minute), 3); tl != 3 {
		t.Fatalf("timeline after the move's switch: %d, want 3", tl)
	}
}
