package appliance_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/theappliance/appliance/appliance"
	"github.com/theappliance/appliance/appliance/moves"
	"github.com/theappliance/appliance/store"
)

// TestPlaceCountsStagedStandby: while a move stages a copy of a project on its target (the move's marks in
// the store's meta: the move job, whose payload names the target), that node counts the project's plan
// memory and storage limit as taken: a new project goes elsewhere and a preview that would not fit beside
// the standby is refused. Once the cutover made the copy the project's instance (the project on the target)
// it counts once, and once the move's marks are gone the target is free of it.
func TestPlaceCountsStagedStandby(t *testing.T) {
	db, err := store.Open(filepath.Join(t.TempDir(), "meta.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	mem := func(plan string) int64 {
		if plan == "big" {
			return 6 << 30
		}
		return 1 << 30
	}
	err = db.Update(func(tx *store.Tx) error {
		for _, n := range []*store.Node{
			{ID: "nod_a", MemoryBytes: 8 << 30, DiskBytes: 100 << 30, PortsFirst: 20000, PortsLast: 20099, State: store.NodeActive},
			{ID: "nod_b", MemoryBytes: 8 << 30, DiskBytes: 100 << 30, PortsFirst: 21000, PortsLast: 21099, State: store.NodeActive},
			{ID: "nod_c", MemoryBytes: 8 << 30, DiskBytes: 100 << 30, PortsFirst: 22000, PortsLast: 22099, State: store.NodeActive},
		} {
			if err := store.Nodes.Put(tx, n); err != nil {
				return err
			}
		}
		for _, p := range []*store.Project{
			{ID: "prj_m", Plan: "big", StorageLimitBytes: 40 << 30, NodeID: "nod_a"}, // the one moving to nod_b
			{ID: "prj_c", Plan: "free", StorageLimitBytes: 1 << 30, NodeID: "nod_c"},
			{ID: "prj_b", Plan: "free", StorageLimitBytes: 1 << 30, NodeID: "nod_b"},
		} {
			if err := store.Projects.Put(tx, p); err != nil {
				return err
			}
		}
		return tx.SetMeta(store.MetaFormedBy, "nod_a")
	})
	if err != nil {
		t.Fatal(err)
	}
	room := func(node string) (r appliance.NodeRoom) {
		t.Helper()
		err := db.View(func(tx *store.Tx) error {
			rooms, err := appliance.Rooms(tx, nil, mem)
			for _, x := range rooms {
				if x.Node.ID == node {
					r = x
				}
			}
			return err
		})
		if err != nil || r.Node == nil {
			t.Fatalf("rooms: %v (node %s measured: %v)", err, node, r.Node != nil)
		}
		return r
	}
	place := func() string {
		t.Helper()
		var id string
		err := db.View(func(tx *store.Tx) error {
			n, err := appliance.Place(tx, nil, mem)
			if n != nil {
				id = n.ID
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	preview := func() error {
		return db.View(func(tx *store.Tx) error {
			_, err := appliance.PlacePreview(tx, nil, mem, "nod_b", &store.Project{ID: "prv_1", PreviewOf: "prj_b", Plan: "big", StorageLimitBytes: 1 << 30})
			return err
		})
	}
	// No move: nod_b and nod_c (one small project each) have the most room, the tie goes to the lower id;
	// a big preview of prj_b fits on nod_b.
	if got := room("nod_b").MemoryFree; got != 7<<30 {
		t.Fatalf("nod_b's free memory before the move: %d MB, want 7168", got>>20)
	}
	if id := place(); id != "nod_b" {
		t.Fatalf("before the move: placed on %s, want nod_b", id)
	}
	if err := preview(); err != nil {
		t.Fatalf("a big preview on nod_b before the move: %v", err)
	}

	// The move of prj_m to nod_b runs (its marks as moves writes them): nod_b counts the staged standby.
	move := &store.Job{ID: "job_move", Type: moves.JobMove, ProjectID: "prj_m", Node: "nod_a", Payload: []byte(`{"to_node":"nod_b"}`)}
	err = db.Update(func(tx *store.Tx) error {
		if err := store.Jobs.Put(tx, move); err != nil {
			return err
		}
		return tx.SetMeta("move/prj_m", move.ID)
	})
	if err != nil {
		t.Fatal(err)
	}
	r := room("nod_b")
	if r.MemoryFree != 1<<30 || r.DiskFree != 59<<30 || r.PortsFree != 98 || r.Projects != 1 {
		t.Fatalf("nod_b while the move stages there: %d MB memory, %d GB disk, %d ports, %d projects free/hosted; want 1024 MB, 59 GB, 98 ports (the standby's port is a scratch one), 1 project",
			r.MemoryFree>>20, r.DiskFree>>30, r.PortsFree, r.Projects)
	}
	if a := room("nod_a"); a.MemoryFree != 2<<30 {
		t.Fatalf("nod_a (the source) while the move stages: %d MB free, want 2048 (the project still runs there)", a.MemoryFree>>20)
	}
	if id := place(); id != "nod_c" {
		t.Fatalf("while the move stages on nod_b: placed on %s, want nod_c", id)
	}
	if err := preview(); err == nil || !strings.Contains(err.Error(), "no room for a preview") {
		t.Fatalf("a big preview on nod_b while a move stages there: %v, want refused for room", err)
	}

	// The cutover moved the project to nod_b (the marks are cleared a moment later): counted once.
	err = db.Update(func(tx *store.Tx) error {
		p, err := store.Projects.Get(tx, "prj_m")
		if err != nil {
			return err
		}
		store.MoveProject(p, "nod_b")
		return store.Projects.Put(tx, p)
	})
	if err != nil {
		t.Fatal(err)
	}
	if r := room("nod_b"); r.MemoryFree != 1<<30 || r.Projects != 2 || r.PortsFree != 96 {
		t.Fatalf("nod_b after the cutover: %d MB free, %d projects, %d ports; want 1024 MB, 2, 96", r.MemoryFree>>20, r.Projects, r.PortsFree)
	}
	if a := room("nod_a"); a.MemoryFree != 8<<30 {
		t.Fatalf("nod_a after the cutover: %d MB free, want 8192", a.MemoryFree>>20)
	}

	// A move that failed (the project back on nod_a, its marks cleared): nod_b is free of it again.
	err = db.Update(func(tx *store.Tx) error {
		p, err := store.Projects.Get(tx, "prj_m")
		if err != nil {
			return err
		}
		store.MoveProject(p, "nod_a")
		if err := store.Projects.Put(tx, p); err != nil {
			return err
		}
		return tx.SetMeta("move/prj_m", "")
	})
	if err != nil {
		t.Fatal(err)
	}
	if r := room("nod_b"); r.MemoryFree != 7<<30 {
		t.Fatalf("nod_b after the move's end: %d MB free, want 7168", r.MemoryFree>>20)
	}
}
