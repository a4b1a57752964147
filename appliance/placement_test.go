package appliance_test

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/theappliance/appliance/appliance"
	"github.com/theappliance/appliance/appliance/apperr"
	"github.com/theappliance/appliance/store"
)

// TestPlace: a new project goes to the live active node with the most room (its scarcest resource's free
// fraction: plans' memory, storage limits, two ports a project), so projects spread over the nodes; a node
// down, joining, draining or out of ports is passed over; a single node (no node records) places nothing.
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
			{ID: "nod_d", MemoryBytes: 64 << 30, DiskBytes: 1 << 40, PortsFirst: 24000, PortsLast: 24999, State: store.NodeDraining},
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
	if got["nod_a"] == 0 || got["nod_b"] == 0 || got["nod_j"] != 0 || got["nod_d"] != 0 || got["nod_c"] > 2 {
		t.Fatalf("placements %v: want projects on a and b, none on the joining or the draining node, at most 2 on c (4 ports)", got)
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

// TestPlacePreview: a preview goes next to its parent while the parent's node has room for it (its plan's
// memory, its storage limit, a port pair); when it has not, or the node is not alive, it is refused with a
// 409 naming the node, never put elsewhere; a single node places nothing.
func TestPlacePreview(t *testing.T) {
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
	prv := func(plan string) *store.Project {
		return &store.Project{ID: "prv_1", PreviewOf: "prj_p", Plan: plan, StorageLimitBytes: 1 << 30}
	}
	place := func(live map[string]bool, parentNode string, p *store.Project) (id string, err error) {
		err = db.View(func(tx *store.Tx) error {
			n, err := appliance.PlacePreview(tx, live, mem, parentNode, p)
			if n != nil {
				id = n.ID
			}
			return err
		})
		return id, err
	}
	if id, err := place(nil, "", prv("free")); err != nil || id != "" {
		t.Fatalf("single node: placed on %q (%v), want nothing", id, err)
	}
	err = db.Update(func(tx *store.Tx) error {
		for _, n := range []*store.Node{
			{ID: "nod_a", MemoryBytes: 8 << 30, DiskBytes: 100 << 30, PortsFirst: 20000, PortsLast: 20099, State: store.NodeActive},
			{ID: "nod_b", MemoryBytes: 16 << 30, DiskBytes: 100 << 30, PortsFirst: 21000, PortsLast: 21099, State: store.NodeActive},
			{ID: "nod_c", MemoryBytes: 8 << 30, DiskBytes: 100 << 30, PortsFirst: 22000, PortsLast: 22003, State: store.NodeActive},
		} {
			if err := store.Nodes.Put(tx, n); err != nil {
				return err
			}
		}
		// two projects on nod_c take its four ports; a big one on nod_a leaves it 2 GB of memory
		for _, p := range []*store.Project{{ID: "prj_p", Plan: "free", NodeID: "nod_c"}, {ID: "prj_q", Plan: "free", NodeID: "nod_c"},
			{ID: "prj_r", Plan: "big", NodeID: "nod_a"}} {
			if err := store.Projects.Put(tx, p); err != nil {
				return err
			}
		}
		return tx.SetMeta(store.MetaFormedBy, "nod_a")
	})
	if err != nil {
		t.Fatal(err)
	}
	if id, err := place(nil, "nod_a", prv("free")); err != nil || id != "nod_a" {
		t.Fatalf("room next to the parent: placed on %q (%v), want nod_a", id, err)
	}
	conflict := func(what string, id string, err error, node string) {
		t.Helper()
		var ae *apperr.Error
		if !errors.As(err, &ae) || ae.Kind != apperr.KindConflict || id != "" || !strings.Contains(err.Error(), node) {
			t.Fatalf("%s: placed on %q (%v), want a 409 naming %s", what, id, err, node)
		}
	}
	id, err := place(nil, "nod_a", prv("big"))
	conflict("a big preview beside a parent whose node has 2 GB left", id, err, "nod_a")
	id, err = place(nil, "nod_c", prv("free"))
	conflict("a preview of a project on a node without free ports", id, err, "nod_c")
	id, err = place(map[string]bool{"nod_b": true, "nod_c": true}, "nod_a", prv("free"))
	conflict("a preview of a project on a node without a lease", id, err, "nod_a")
}
