package appliance

import (
	"context"
	"sort"
	"time"

	"github.com/theappliance/appliance/appliance/apperr"
	"github.com/theappliance/appliance/store"
)

// NodeRoom is how much room a node of a cluster has for one more project (Place's measure).
type NodeRoom struct {
	Node     *store.Node
	Projects int // the projects (previews included, not deleted) it hosts
	// MemoryFree, DiskFree and PortsFree are its record's memory, disk and port range minus what its
	// projects reserve: their plans' memory, their storage limits, two ports each (direct and pooled).
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
		r := NodeRoom{Node: n, MemoryFree: n.MemoryBytes, DiskFree: n.DiskBytes, PortsFree: n.PortsLast - n.PortsFirst + 1}
		if n.PortsFirst == 0 {
			r.PortsFree = 0
		}
		for _, p := range projects {
			if store.ProjectNode(tx, p) != n.ID {
				continue
			}
			r.Projects++
			r.MemoryFree -= planMemory(p.Plan)
			r.DiskFree -= p.StorageLimitBytes
			r.PortsFree -= 2
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

// placeNew sets a new project's node (NodeID) and the host its connection URLs name (the node's
// --public-host) in a cluster; nothing on a single node.
func (s *Service) placeNew(tx *store.Tx, prj *store.Project) error {
	var live map[string]bool
	if s.liveNodes != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		l, err := s.liveNodes(ctx)
		if err != nil {
			return Internal(err, "read the cluster's live nodes")
		}
		live = l
	}
	n, err := Place(tx, live, func(plan string) int64 { return s.planOrDefault(plan).MemoryBytes })
	if err != nil || n == nil {
		return err
	}
	prj.NodeID = n.ID
	if n.PublicHost != "" {
		prj.PublicHost = n.PublicHost
	}
	return nil
}
