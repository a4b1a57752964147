package moves

import (
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/theappliance/appliance/store"
)

// TestOpenedOn: the source's job counts its move as having happened (no rollback after the move-in
// failed) only when the target's word "opened" is this move's and the project's records name the target
// at a later placement epoch than the one the move paused; a half-done rebuild (records moved, no word),
// records put back, another move's word or another node do not. It says which node the records name.
func TestOpenedOn(t *testing.T) {
	db, err := store.Open(filepath.Join(t.TempDir(), "meta.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	s := New(Config{NodeID: "n1"}, Deps{DB: db, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Clock: time.Now})
	paused := records{Project: &store.Project{ID: "prj_1", NodeID: "n1", PlacementEpoch: 1}, MoveIn: "job_2", PausedAt: time.Now(), LSN: "0/7000000"}
	opened := `{"state":"opened","key":"job_1","backup_key":"b1","opened_at":"2026-11-28T07:02:00Z"}`
	for _, c := range []struct {
		name, node, mark, stage string
		epoch                   int64
		want                    bool
	}{
		{"opened on the target", "n3", "job_1", opened, 2, true},
		{"records moved, no word (a half-done rebuild)", "n3", "job_1", `{"state":"staged","key":"job_1"}`, 2, false},
		{"word, records put back on the source", "n1", "job_1", opened, 1, false},
		{"word, records on the target at the paused epoch", "n3", "job_1", opened, 1, false},
		{"word, project on another node", "n2", "job_1", opened, 2, false},
		{"another move's word", "n3", "job_1", `{"state":"opened","key":"job_0"}`, 2, false},
		{"the move's mark gone", "n3", "", opened, 2, false},
	} {
		err := db.Update(func(tx *store.Tx) error {
			if err := store.Projects.Put(tx, &store.Project{ID: "prj_1", NodeID: c.node, PlacementEpoch: c.epoch}); err != nil {
				return err
			}
			if err := tx.SetMeta(metaPrefix+"prj_1", c.mark); err != nil {
				return err
			}
			return tx.SetMeta(stagePrefix+"prj_1", c.stage)
		})
		if err != nil {
			t.Fatal(err)
		}
		st, node, got := s.openedOn("prj_1", "job_1", "n3", paused)
		if got != c.want || node != c.node {
			t.Errorf("%s: openedOn %v on node %q, want %v on %q", c.name, got, node, c.want, c.node)
		}
		if got && (st.BackupKey != "b1" || st.OpenedAt.IsZero()) {
			t.Errorf("%s: the target's word read as %+v", c.name, st)
		}
	}
}
