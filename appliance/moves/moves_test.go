package moves_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance"
	"github.com/theappliance/appliance/appliance/apperr"
	"github.com/theappliance/appliance/appliance/moves"
	"github.com/theappliance/appliance/store"
)

// roomsHost is a Host whose Rooms is placement's (appliance.Rooms) over the store; Check uses nothing
// else of it.
type roomsHost struct{ moves.Host }

func (roomsHost) Rooms(tx *store.Tx, live map[string]bool) ([]moves.Room, error) {
	rooms, err := appliance.Rooms(tx, live, func(string) int64 { return 0 })
	out := make([]moves.Room, len(rooms))
	for i, r := range rooms {
		out[i] = moves.Room{Node: r.Node, PortsFree: r.PortsFree}
	}
	return out, err
}

// setup stores three nodes (n2 with room for one project, n3 with none, n4 joining) and a project on n1
// with a completed backup.
func setup(t *testing.T, backupStore bool) (*moves.Service, *store.DB, *store.Project) {
	t.Helper()
	db, err := store.Open(filepath.Join(t.TempDir(), "meta.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	prj := &store.Project{ID: "prj_a", Name: "a", State: api.ProjectActive, RuntimeStatus: api.RuntimeActive, NodeID: "n1", PrimaryInstanceID: "ins_a"}
	err = db.Update(func(tx *store.Tx) error {
		for _, n := range []*store.Node{
			{ID: "n1", State: store.NodeActive, PortsFirst: 10000, PortsLast: 10099},
			{ID: "n2", State: store.NodeActive, PortsFirst: 11000, PortsLast: 11001},
			{ID: "n3", State: store.NodeActive, PortsFirst: 12000, PortsLast: 12001},
			{ID: "n4", State: store.NodeJoining, PortsFirst: 13000, PortsLast: 13099},
		} {
			if err := store.Nodes.Put(tx, n); err != nil {
				return err
			}
		}
		if err := store.Projects.Put(tx, prj); err != nil {
			return err
		}
		// n3's ports are taken by a project of its own.
		if err := store.Projects.Put(tx, &store.Project{ID: "prj_b", State: api.ProjectActive, NodeID: "n3"}); err != nil {
			return err
		}
		for _, in := range []*store.Instance{{ID: "ins_a", ProjectID: prj.ID}, {ID: "ins_off", ProjectID: prj.ID, WALArchiveOff: true}} {
			if err := store.Instances.Put(tx, in); err != nil {
				return err
			}
		}
		return store.Backups.Put(tx, &store.Backup{ID: "bak_a", ProjectID: prj.ID, State: api.BackupCompleted, CreatedAt: time.Now()})
	})
	if err != nil {
		t.Fatal(err)
	}
	s := moves.New(moves.Config{NodeID: "n1"}, moves.Deps{DB: db, Clock: time.Now, BackupStore: backupStore, Host: roomsHost{}})
	return s, db, prj
}

func check(t *testing.T, s *moves.Service, db *store.DB, prj *store.Project, node string, live map[string]bool) error {
	t.Helper()
	var err error
	_ = db.View(func(tx *store.Tx) error { err = s.Check(tx, prj, node, live); return nil })
	return err
}

// TestCheck: each reason a move is refused, with its kind (400 for an unknown node, 409 otherwise), and
// moves that may go (one of a project without a base backup: the move takes one).
func TestCheck(t *testing.T) {
	live := map[string]bool{"n1": true, "n2": true, "n3": true, "n4": true}
	s, db, prj := setup(t, true)
	if err := check(t, s, db, prj, "n2", live); err != nil {
		t.Fatalf("a move to n2: %v", err)
	}
	// A project without a base backup may move (the move takes one first).
	nb := *prj
	nb.ID = "prj_c"
	if err := check(t, s, db, &nb, "n2", live); err != nil {
		t.Fatalf("a move of a project without a backup: %v", err)
	}
	for _, c := range []struct {
		name, node string
		live       map[string]bool
		prj        func(p store.Project) *store.Project
		kind       apperr.Kind
		want       string
	}{
		{"unknown node", "n9", live, nil, apperr.KindInvalid, "no node n9"},
		{"its own node", "n1", live, nil, apperr.KindConflict, "is on node n1 already"},
		{"target without a lease", "n2", map[string]bool{"n1": true}, nil, apperr.KindConflict, "not alive"},
		{"source without a lease", "n2", map[string]bool{"n2": true}, nil, apperr.KindConflict, "holds no lease"},
		{"target joining", "n4", live, nil, apperr.KindConflict, "not alive (state joining"},
		{"target full", "n3", live, nil, apperr.KindConflict, "no free pair of ports"},
		{"project suspended", "n2", live, func(p store.Project) *store.Project { p.RuntimeStatus = api.RuntimeSuspended; return &p }, apperr.KindConflict, "only an active, running project"},
		{"WAL archiving off", "n2", live, func(p store.Project) *store.Project { p.PrimaryInstanceID = "ins_off"; return &p }, apperr.KindConflict, "archiving is off"},
	} {
		p := prj
		if c.prj != nil {
			p = c.prj(*prj)
		}
		err := check(t, s, db, p, c.node, c.live)
		if err == nil || apperr.KindOf(err) != c.kind || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v (kind %v), want %v %q", c.name, err, apperr.KindOf(err), c.kind, c.want)
		}
	}
	// A move running already.
	if err := db.Update(func(tx *store.Tx) error { return tx.SetMeta("move/"+prj.ID, "job_x") }); err != nil {
		t.Fatal(err)
	}
	if err := check(t, s, db, prj, "n2", live); apperr.KindOf(err) != apperr.KindConflict || !strings.Contains(err.Error(), "being moved already (job job_x)") {
		t.Errorf("a second move: %v", err)
	}

	// Without a backup store.
	s, db, prj = setup(t, false)
	if err := check(t, s, db, prj, "n2", live); apperr.KindOf(err) != apperr.KindConflict || !strings.Contains(err.Error(), "no off-machine backup store") {
		t.Errorf("without a backup store: %v", err)
	}
	// A single node answers 409 before anything else.
	single := moves.New(moves.Config{}, moves.Deps{DB: db, Clock: time.Now, Host: roomsHost{}})
	if _, err := single.Move(context.Background(), prj.ID, "n2", nil); apperr.KindOf(err) != apperr.KindConflict || !strings.Contains(err.Error(), "single node") {
		t.Errorf("a single node: %v", err)
	}
}
