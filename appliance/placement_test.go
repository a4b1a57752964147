package appliance_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/theappliance/appliance/appliance"
	"github.com/theappliance/appliance/store"
)

// TestPlace: a new project goes to the live active node with the most room (its scarcest resource's free
// fraction: plans' memory, storage limits, two ports a project), so projects spread over the nodes; a node
// down, joining or out of ports is passed over; a single node (no node records) places nothing.
func TestPlace(t *testing.T) {
	db, err := store.Open(filepath.Join(t.TempDir(), "meta.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	mem := func(string) int64 { return 1 << 30 }
	place := func(live map[string]bool) (id string, err error) {
		err = db.View(func(tx *store.Tx) error {
			n, err := appliance.Place(tx, live, mem)
			if n != nil {
				id = n.ID
			}
			return err
		})
		return id, err
	}
	if id, err := place(nil); err != nil || id != "" {
		t.Fatalf("single node: placed on %q (%v), want nothing", id, err)
	}
	now := time.Now()
	err = db.Update(func(tx *store.Tx) error {
		for i, n := range []*store.Node{
			{ID: "nod_a", MemoryBytes: 8 << 30, DiskBytes: 100 << 30, PortsFirst: 20000, PortsLast: 20099, State: store.NodeActive},
			{ID: "nod_b", MemoryBytes: 8 << 30, DiskBytes: 100 << 30, PortsFirst: 21000, PortsLast: 21099, State: store.NodeActive},
			{ID: "nod_c", MemoryBytes: 8 << 30, DiskBytes: 100 << 30, PortsFirst: 22000, PortsLast: 22003, State: store.NodeActive},
			{ID: "nod_j", MemoryBytes: 64 << 30, DiskBytes: 1 << 40, PortsFirst: 23000, PortsLast: 23999, State: store.NodeJoining},
		} {
			n.JoinedAt = now.Add(time.Duration(i) * time.Second)
			if err := store.Nodes.Put(tx, n); err != nil {
				return err
			}
		}
		return tx.SetMeta(store.MetaFormedBy, "nod_a")
	})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for i := range 6 {
		id, err := place(nil)
		if err != nil {
			t.Fatal(err)
		}
		got[id]++
		// a project without NodeID is the forming node's (nod_a)
		prj := &store.Project{ID: "prj_" + string(rune('0'+i)), Plan: "free", StorageLimitBytes: 1 << 30, NodeID: id}
		if id == "nod_a" && i%2 == 0 {
			prj.NodeID = ""
		}
		if err := db.Update(func(tx *store.Tx) error { return store.Projects.Put(tx, prj) }); err != nil {
			t.Fatal(err)
		}
	}
	// nod_c's 4 ports hold two projects (a pair each), its free fraction falls fastest: a, b get more.
	if got["nod_a"] == 0 || got["nod_b"] == 0 || got["nod_j"] != 0 || got["nod_c"] > 2 {
		t.Fatalf("placements %v: want projects on a and b, none on the joining node, at most 2 on c (4 ports)", got)
	}
	if id, err := place(map[string]bool{"nod_b": true}); err != nil || id != "nod_b" {
		t.Fatalf("only b alive: placed on %q (%v)", id, err)
	}
	if id, err := place(map[string]bool{}); err == nil || id != "" {
		t.Fatalf("no live node: placed on %q (%v), want an error", id, err)
	}
	err = db.Update(func(tx *store.Tx) error {
		for i := range 2 {
			if err := store.Projects.Put(tx, &store.Project{ID: "prj_c" + string(rune('0'+i)), NodeID: "nod_c"}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if id, err := place(map[string]bool{"nod_c": true}); err == nil || id != "" {
		t.Fatalf("only c alive, its ports taken: placed on %q (%v), want an error", id, err)
	}
}
