package store

import "testing"

// TestLocal: on a single node every project and instance is local; a store that knows its node (SetNode)
// tells its own projects (NodeID, or none: the forming node's), their instances and its own spares from
// the other nodes'.
func TestLocal(t *testing.T) {
	db := openTest(t)
	err := db.Update(func(tx *Tx) error {
		for _, p := range []*Project{{ID: "prj_a", NodeID: "nod_a"}, {ID: "prj_b", NodeID: "nod_b"}, {ID: "prj_old"}} {
			if err := Projects.Put(tx, p); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	insts := []*Instance{{ID: "ins_a", ProjectID: "prj_a"}, {ID: "ins_b", ProjectID: "prj_b"}, {ID: "ins_old", ProjectID: "prj_old"},
		{ID: "ins_spare_a", NodeID: "nod_a"}, {ID: "ins_spare_b", NodeID: "nod_b"}, {ID: "ins_spare_old"}, {ID: "ins_gone", ProjectID: "prj_gone"}}
	local := func() map[string]bool {
		out := map[string]bool{}
		db.View(func(tx *Tx) error {
			for _, in := range insts {
				out[in.ID] = LocalInstance(tx, in)
			}
			return nil
		})
		return out
	}
	for id, l := range local() {
		if !l {
			t.Errorf("single node: %s is not local", id)
		}
	}
	if err := db.Update(func(tx *Tx) error { return tx.SetMeta(MetaFormedBy, "nod_a") }); err != nil {
		t.Fatal(err)
	}
	db.SetNode("nod_a")
	want := map[string]bool{"ins_a": true, "ins_old": true, "ins_spare_a": true, "ins_spare_old": true}
	for id, l := range local() {
		if l != want[id] {
			t.Errorf("node a: %s local %v, want %v", id, l, want[id])
		}
	}
	db.SetNode("nod_b")
	want = map[string]bool{"ins_b": true, "ins_spare_b": true}
	for id, l := range local() {
		if l != want[id] {
			t.Errorf("node b: %s local %v, want %v", id, l, want[id])
		}
	}
}
