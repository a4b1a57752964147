package moves

import (
	"path/filepath"
	"testing"

	"github.com/theappliance/appliance/store"
)

// TestCutoverTold: a running move told its target where the source paused (from then on the target may
// have promoted its copy) when its cutover record is this move's and names the paused position; not
// before the pause (the catch-up point alone), not for another move's record, an abandon's, or once the
// move's mark is gone.
func TestCutoverTold(t *testing.T) {
	db, err := store.Open(filepath.Join(t.TempDir(), "meta.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, c := range []struct {
		name, mark, cutover string
		want                bool
	}{
		{"paused position told", "job_1", `{"key":"job_1","catch_up_lsn":"0/5000000","paused_lsn":"0/7000000","timeline":1}`, true},
		{"catch-up point only", "job_1", `{"key":"job_1","catch_up_lsn":"0/5000000"}`, false},
		{"abandoned before the pause", "job_1", `{"key":"job_1","abort":"the staging failed"}`, false},
		{"another move's record", "job_1", `{"key":"job_0","paused_lsn":"0/7000000"}`, false},
		{"the move's mark gone", "", `{"key":"job_1","paused_lsn":"0/7000000"}`, false},
		{"no record", "job_1", "", false},
	} {
		err := db.Update(func(tx *store.Tx) error {
			if err := tx.SetMeta(metaPrefix+"prj_1", c.mark); err != nil {
				return err
			}
			return tx.SetMeta(cutoverPrefix+"prj_1", c.cutover)
		})
		if err != nil {
			t.Fatal(err)
		}
		var got bool
		_ = db.View(func(tx *store.Tx) error { got = CutoverTold(tx, "prj_1"); return nil })
		if got != c.want {
			t.Errorf("%s: CutoverTold %v, want %v", c.name, got, c.want)
		}
	}
}
