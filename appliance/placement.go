package appliance

import (
	"context"
	"sort"
	"time"

	"github.com/theappliance/appliance/appliance/apperr"
	"github.com/theappliance/appliance/appliance/moves"
	"github.com/theappliance/appliance/store"
)

// NodeRoom is how much room a node of a cluster has for one more project (Place's measure).
type NodeRoom struct {
	Node     *store.Node
	Projects int // the projects (previews included, not deleted) it hosts
	// MemoryFree, DiskFree and PortsFree are its record's memory, disk and port range minus what its
	// projects reserve (store.NodeRoom, which GET /v1/nodes and cluster nodes show too).
	// A project a move stages a copy of on it counts its memory and disk too (moves.StagingOn).
	MemoryFree, DiskFree int64
	PortsFree            int
	// Score is the smallest of the three free fractions (free / total; a total of 0, unknown, counts as
	// wholly free): the room of its scarcest resource. Place picks the highest.
	Score float64
}

// Rooms measures every active node that live says is alive (nil live: every active node), best first:
// highest Score, then fewer projects, then id. planMemory gives a plan's memory (its server's limit).
func Rooms(tx *store.Tx, live map[string]bool, planMemory func(plan string) int64) ([]NodeRoom, error) {
	nodes, err := store.Nodes.All(tx, nil)
	if err != nil {
		return nil, err
	}
	projects, err := store.Projects.All(tx, func(p *store.Project) bool { return p.DeletedAt == nil })
	if err != nil {
		return nil, err
	}
	var out []NodeRoom
	for _, n := range nodes {
		if n.State != store.NodeActive || (live != nil && !live[n.ID]) {
			continue
		}
		var hosted []*store.Project
		var staged []*store.Project
		for _, p := range projects {
			if store.ProjectNode(tx, p) == n.ID {
				hosted = append(hosted, p)
			} else if moves.StagingOn(tx, p) == n.ID {
				staged = append(staged, p)
			}
		}
		r := NodeRoom{Node: n, Projects: len(hosted)}
		r.MemoryFree, r.DiskFree, r.PortsFree = store.NodeRoom(n, hosted, planMemory)
		// A move's staged standby of a project (moves.StagingOn) takes its plan's memory and its storage
		// here while it stages; its scratch port is not of the node's range.
		for _, p := range staged {
			r.MemoryFree -= planMemory(p.Plan)
			r.DiskFree -= p.StorageLimitBytes
		}
		r.Score = min(fraction(r.MemoryFree, n.MemoryBytes), fraction(r.DiskFree, n.DiskBytes),
			fraction(int64(r.PortsFree), int64(n.PortsLast-n.PortsFirst+1)))
		out = append(out, r)
	}
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Score != b.Score {
			return a.Score > b.Score
		}
		if a.Projects != b.Projects {
			return a.Projects < b.Projects
		}
		return a.Node.ID < b.Node.ID
	})
	return out, nil
}

func fraction(free, total int64) float64 {
	if total <= 0 {
		return 1
	}
	return float64(free) / float64(total)
}

// Place picks the node a new project goes to: of the live active nodes with two free ports left, the one
// with the most room (Rooms). It returns nil on a single node (no node records); an error when a cluster
// has no live node with a free port pair.
func Place(tx *store.Tx, live map[string]bool, planMemory func(plan string) int64) (*store.Node, error) {
	rooms, err := Rooms(tx, live, planMemory)
	if err != nil {
		return nil, err
	}
	if len(rooms) == 0 {
		if n, err := store.Nodes.All(tx, nil); err != nil {
			return nil, err
		} else if len(n) == 0 {
			return nil, nil // a single node
		}
		return nil, apperr.Unavailable("no node of the cluster is alive to host a new project")
	}
	for _, r := range rooms {
		if r.PortsFree >= 2 {
			return r.Node, nil
		}
	}
	return nil, apperr.Unavailable("no live node of the cluster has a free pair of ports left for a new project")
}

// fits reports whether a node's room holds one more project of memory and storage bytes and its port pair
// (a total of 0, unknown, holds anything).
func (r NodeRoom) fits(memory, storage int64) bool {
	return r.PortsFree >= 2 && (r.Node.MemoryBytes <= 0 || r.MemoryFree >= memory) && (r.Node.DiskBytes <= 0 || r.DiskFree >= storage)
}

// PlacePreview picks the node of a new preview: its parent's (parentNode), always — a clone copies the
// parent's files, which only that node has, and a preview's routes (its schema diff against the parent
// among them) and jobs run beside the parent's instances. It must fit there: the node alive, with room for
// the preview's plan memory, its storage limit and a port pair; otherwise a 409 says what is short (a
// preview never overcommits its parent's node; new projects go to the node with the most room). nil on
// a single node.
func PlacePreview(tx *store.Tx, live map[string]bool, planMemory func(plan string) int64, parentNode string, prv *store.Project) (*store.Node, error) {
	rooms, err := Rooms(tx, live, planMemory)
	if err != nil {
		return nil, err
	}
	if len(rooms) == 0 {
		return Place(tx, live, planMemory) // a single node, or none alive: Place says which
	}
	mem := planMemory(prv.Plan)
	for _, r := range rooms {
		if r.Node.ID != parentNode {
			continue
		}
		if !r.fits(mem, prv.StorageLimitBytes) {
			return nil, apperr.Conflict("node %s, where project %s runs, has no room for a preview of it: %d MB of memory free for the plan's %d MB, %d MB of disk for a storage limit of %d MB, %d ports for 2 (a preview runs next to its parent; delete a preview or move the project)",
				parentNode, prv.PreviewOf, r.MemoryFree>>20, mem>>20, r.DiskFree>>20, prv.StorageLimitBytes>>20, r.PortsFree)
		}
		return r.Node, nil
	}
	return nil, apperr.Conflict("node %s, where project %s runs, holds no lease: a preview runs next to its parent", parentNode, prv.PreviewOf)
}

// live is the cluster's live nodes (nil on a single node: every node counts as live).
func (s *Service) live() (map[string]bool, error) {
	if s.liveNodes == nil {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	l, err := s.liveNodes(ctx)
	if err != nil {
		return nil, Internal(err, "read the cluster's live nodes")
	}
	return l, nil
}

// placePreview sets a new preview's node and the host its URLs name (PlacePreview); nothing on a single
// node.
func (s *Service) placePreview(tx *store.Tx, parent, prv *store.Project) error {
	return s.placeBy(prv, func(live map[string]bool, mem func(string) int64) (*store.Node, error) {
		return PlacePreview(tx, live, mem, store.ProjectNode(tx, parent), prv)
	})
}

// placeNew sets a new project's node (NodeID) and the host its connection URLs name (the node's
// --public-host) in a cluster; nothing on a single node.
func (s *Service) placeNew(tx *store.Tx, prj *store.Project) error {
	return s.placeBy(prj, func(live map[string]bool, mem func(string) int64) (*store.Node, error) {
		return Place(tx, live, mem)
	})
}

// placeBy sets prj's node and host to the node pick chooses among the live ones (nil: a single node).
func (s *Service) placeBy(prj *store.Project, pick func(live map[string]bool, planMemory func(string) int64) (*store.Node, error)) error {
	live, err := s.live()
	if err != nil {
		return err
	}
	n, err := pick(live, func(plan string) int64 { return s.planOrDefault(plan).MemoryBytes })
	if err != nil || n == nil {
		return err
	}
	prj.NodeID = n.ID
	if n.PublicHost != "" {
		prj.PublicHost = n.PublicHost
	}
	return nil
}
