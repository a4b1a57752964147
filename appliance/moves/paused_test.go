package moves_test

import (
	"path/filepath"
	"testing"

	"github.com/theappliance/appliance/appliance/moves"
	"github.com/theappliance/appliance/store"
)

// TestPausedBy: a project counts as paused by its move (its node's start leaves its server stopped) only
// while the move runs (its mark) and its records say the pause began, and the target has not opened it
// (OpenedBy: then the target's start serves it); a move staging, or marks an ended move left in its
// records key alone, do not. An "opened" word of another move, or of none running, is no opening.
func TestPausedBy(t *testing.T) {
	db, err := store.Open(filepath.Join(t.TempDir(), "meta.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	paused := `{"move_in_job":"job_2","paused_at":"2026-11-28T07:01:00Z","lsn":"0/7000000"}`
	for _, c := range []struct {
		name                 string
		mark, records, stage string
		want, opened         bool
	}{
		{"no move", "", "", "", false, false},
		{"staging", "job_1", `{"move_in_job":"job_2","staging_at":"2026-11-28T07:00:00Z","paused_at":"0001-01-01T00:00:00Z"}`, "", false, false},
		{"paused", "job_1", `{"move_in_job":"job_2","paused_at":"2026-11-28T07:01:00Z"}`, "", true, false},
		{"paused, after the cutover's word", "job_1", `{"move_in_job":"job_2","paused_at":"2026-11-28T07:01:00Z","lsn":"0/7000000"}`, "", true, false},
		{"records without the move's mark", "", `{"move_in_job":"job_2","paused_at":"2026-11-28T07:01:00Z"}`, "", false, false},
		{"unreadable records", "job_1", `{`, "", false, false},
		{"paused, the target staged", "job_1", paused, `{"state":"staged","key":"job_1"}`, true, false},
		{"paused, the target opened it", "job_1", paused, `{"state":"opened","key":"job_1"}`, false, true},
		{"paused, another move's opening", "job_1", paused, `{"state":"opened","key":"job_0"}`, true, false},
		{"an opening without the move's mark", "", paused, `{"state":"opened","key":"job_1"}`, false, false},
		{"unreadable word", "job_1", paused, `{`, true, false},
	} {
		var got, opened bool
		err := db.Update(func(tx *store.Tx) error {
			if err := tx.SetMeta("move/prj_1", c.mark); err != nil {
				return err
			}
			if err := tx.SetMeta("move_records/prj_1", c.records); err != nil {
				return err
			}
			if err := tx.SetMeta("move_stage/prj_1", c.stage); err != nil {
				return err
			}
			got, opened = moves.PausedBy(tx, "prj_1"), moves.OpenedBy(tx, "prj_1")
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if got != c.want {
			t.Errorf("%s: PausedBy %v, want %v", c.name, got, c.want)
		}
		if opened != c.opened {
			t.Errorf("%s: OpenedBy %v, want %v", c.name, opened, c.opened)
		}
	}
}

// TestUnopenedOn: a node is the target of a move that did not open the project there (its start stops
// what the cut-short rebuild started) only while the move paused it, its records name that node and its
// saved records another, and the target's word is not "opened".
func TestUnopenedOn(t *testing.T) {
	db, err := store.Open(filepath.Join(t.TempDir(), "meta.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	paused := `{"project":{"id":"prj_1","node_id":"n1","placement_epoch":1},"move_in_job":"job_2","paused_at":"2026-11-28T07:01:00Z","lsn":"0/7000000"}`
	for _, c := range []struct {
		name, node, mark, records, stage, on string
		want                                 bool
	}{
		{"records moved, not opened", "n3", "job_1", paused, `{"state":"staged","key":"job_1"}`, "n3", true},
		{"on the source", "n1", "job_1", paused, `{"state":"staged","key":"job_1"}`, "n1", false},
		{"records put back, asked on the target", "n1", "job_1", paused, `{"state":"staged","key":"job_1"}`, "n3", false},
		{"opened", "n3", "job_1", paused, `{"state":"opened","key":"job_1"}`, "n3", false},
		{"no move running", "n3", "", paused, `{"state":"staged","key":"job_1"}`, "n3", false},
	} {
		var got bool
		err := db.Update(func(tx *store.Tx) error {
			if err := store.Projects.Put(tx, &store.Project{ID: "prj_1", NodeID: c.node, PlacementEpoch: 2}); err != nil {
				return err
			}
			for k, v := range map[string]string{"move/prj_1": c.mark, "move_records/prj_1": c.records, "move_stage/prj_1": c.stage} {
				if err := tx.SetMeta(k, v); err != nil {
					return err
				}
			}
			got = moves.UnopenedOn(tx, "prj_1", c.on)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if got != c.want {
			t.Errorf("%s: UnopenedOn %v, want %v", c.name, got, c.want)
		}
	}
}
