package moves_test

import (
	"path/filepath"
	"testing"

	"github.com/theappliance/appliance/appliance/moves"
	"github.com/theappliance/appliance/store"
)

// TestPausedBy: a project counts as paused by its move (its node's start leaves its server stopped) only
// while the move runs (its mark) and its records say the pause began; a move staging, or marks an ended
// move left in its records key alone, do not.
func TestPausedBy(t *testing.T) {
	db, err := store.Open(filepath.Join(t.TempDir(), "meta.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, c := range []struct {
		name          string
		mark, records string
		want          bool
	}{
		{"no move", "", "", false},
		{"staging", "job_1", `{"move_in_job":"job_2","staging_at":"2026-11-28T07:00:00Z","paused_at":"0001-01-01T00:00:00Z"}`, false},
		{"paused", "job_1", `{"move_in_job":"job_2","paused_at":"2026-11-28T07:01:00Z"}`, true},
		{"paused, after the cutover's word", "job_1", `{"move_in_job":"job_2","paused_at":"2026-11-28T07:01:00Z","lsn":"0/7000000"}`, true},
		{"records without the move's mark", "", `{"move_in_job":"job_2","paused_at":"2026-11-28T07:01:00Z"}`, false},
		{"unreadable records", "job_1", `{`, false},
	} {
		var got bool
		err := db.Update(func(tx *store.Tx) error {
			if err := tx.SetMeta("move/prj_1", c.mark); err != nil {
				return err
			}
			if err := tx.SetMeta("move_records/prj_1", c.records); err != nil {
				return err
			}
			got = moves.PausedBy(tx, "prj_1")
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if got != c.want {
			t.Errorf("%s: PausedBy %v, want %v", c.name, got, c.want)
		}
	}
}
