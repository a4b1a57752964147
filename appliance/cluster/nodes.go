package cluster

import (
	"context"
	"encoding/json"

	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/store"
)

// NodeInfo is what a node registers about itself as it starts.
type NodeInfo struct {
	APIURL, PublicHost, Version string
	PortsFirst, PortsLast       int
	KVRESPPort                  int // its key-value fronts (0, "": none)
	KVRESTURL                   string
}

// Register writes (or refreshes) this node's record: active, its addresses, capacity, version and the
// time it was seen.
func (m *Member) Register(info NodeInfo) error {
	now := time.Now().UTC()
	mem, disk := capacity(m.dataDir)
	return m.db.Update(func(tx *store.Tx) error {
		n, err := store.Nodes.Get(tx, m.cfg.NodeID)
		if errors.Is(err, store.ErrNotFound) {
			n = &store.Node{ID: m.cfg.NodeID, JoinedAt: now}
		} else if err != nil {
			return err
		}
		n.Name, n.Advertise = m.cfg.MemberName, m.cfg.Advertise
		n.ClientURL, n.PeerURL, n.JoinURL = m.cfg.ClientURL(), m.cfg.PeerURL(), m.cfg.JoinURL()
		n.EtcdMemberID = memberIDHex(uint64(m.srv.Etcd().Server.MemberID()))
		n.APIURL, n.PublicHost, n.Version = info.APIURL, info.PublicHost, info.Version
		n.PortsFirst, n.PortsLast = info.PortsFirst, info.PortsLast
		n.KVRESPPort, n.KVRESTURL = info.KVRESPPort, info.KVRESTURL
		n.MemoryBytes, n.DiskBytes = mem, disk
		n.State, n.LastSeenAt = store.NodeActive, now
		if serial, err := certSerial(certFile(m.dataDir)); err == nil {
			n.CertSerial = serial
		}
		return store.Nodes.Put(tx, n)
	})
}

// capacity is the machine's memory and the data directory's filesystem's size (bytes; 0 when unknown).
func capacity(dataDir string) (memory, disk int64) {
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) >= 2 && f[0] == "MemTotal:" {
				kb, _ := strconv.ParseInt(f[1], 10, 64)
				memory = kb << 10
			}
		}
	}
	var st syscall.Statfs_t
	if syscall.Statfs(dataDir, &st) == nil {
		disk = int64(st.Blocks) * st.Bsize
	}
	return memory, disk
}

// NodeView is a node as `cluster nodes` lists it.
type NodeView struct {
	store.Node
	Projects []string `json:"projects"` // the ids of the projects it hosts (not deleted)
}

// Liveness values of api.ClusterNode (Nodes): whether its liveness key (appliance/cluster/lease's
// <LeasePrefix>alive/<node>, bound to the lease it keeps alive) is there now.
const (
	NodeAlive = "alive"
	NodeDown  = "down"
)

// Nodes lists the cluster's nodes as appliance cluster nodes and GET /v1/nodes show them (one function
// for both): each node's record, the projects it hosts and the room they leave of its capacity as
// placement counts it (store.NodeRoom; planMemory is a plan's memory), its liveness and lease (the lease
// keys, <LeasePrefix>alive/<node>, and etcd's TimeToLive of their leases), and its etcd member's role and
// whether it leads. All of it is read through c from the store and etcd, so every node answers the same
// (the leader as the member c talks to knows it).
func Nodes(ctx context.Context, c *clientv3.Client, db *store.DB, planMemory func(plan string) int64) ([]api.ClusterNode, error) {
	list, err := ListNodes(db)
	if err != nil {
		return nil, err
	}
	rooms, err := roomsOf(db, list, planMemory)
	if err != nil {
		return nil, err
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := c.Get(rctx, LeasePrefix+"alive/", clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("read the nodes' liveness: %w", err)
	}
	leases := map[string]string{} // node -> its lease (hex); present: alive
	for _, kv := range resp.Kvs {
		var v struct {
			Lease string `json:"lease"`
		}
		_ = json.Unmarshal(kv.Value, &v) // an unreadable value: alive, lease unknown
		leases[strings.TrimPrefix(string(kv.Key), LeasePrefix+"alive/")] = v.Lease
	}
	members, err := c.MemberList(rctx)
	if err != nil {
		return nil, fmt.Errorf("list the etcd members: %w", err)
	}
	learner := map[string]bool{}
	for _, mem := range members.Members {
		learner[memberIDHex(mem.ID)] = mem.IsLearner
	}
	var leader string
	for _, ep := range c.Endpoints() {
		if st, err := c.Status(rctx, ep); err == nil {
			leader = memberIDHex(st.Leader)
			break
		}
	}
	out := make([]api.ClusterNode, len(list))
	for i, n := range list {
		v := nodeView(n, rooms[i])
		v.Liveness, v.Status = NodeDown, api.NodeStatusUnavailable
		lease, alive := leases[n.ID]
		if alive {
			v.Liveness, v.Status = NodeAlive, api.NodeStatusAlive
		}
		if n.State == store.NodeJoining {
			v.Status = api.NodeStatusJoining
		}
		if n.State == store.NodeDraining && alive {
			v.Status = api.NodeStatusDraining
		}
		if l, ok := learner[n.EtcdMemberID]; ok && n.EtcdMemberID != "" {
			v.Role = api.NodeRoleVoter
			if l {
				v.Role = api.NodeRoleLearner
			}
			v.Leader = n.EtcdMemberID == leader
		}
		if id, err := strconv.ParseInt(lease, 16, 64); alive && err == nil {
			if ttl, err := c.TimeToLive(rctx, clientv3.LeaseID(id)); err == nil && ttl.TTL >= 0 {
				left, age := ttl.TTL, max(ttl.GrantedTTL-ttl.TTL, 0)
				v.LeaseTTLSeconds, v.HeartbeatAgeSeconds = &left, &age
			}
		}
		out[i] = v
	}
	return out, nil
}

// LocalNode is the node of a single-node appliance (no cluster) as GET /v1/nodes lists it: n describes
// it (its id empty; its capacity from Capacity), every project is its own, its status alive (it answers)
// and it has no etcd member.
func LocalNode(db *store.DB, n store.Node, planMemory func(plan string) int64) (api.ClusterNode, error) {
	var hosted []*store.Project
	err := db.View(func(tx *store.Tx) (err error) {
		hosted, err = store.Projects.All(tx, func(p *store.Project) bool { return p.DeletedAt == nil })
		return err
	})
	if err != nil {
		return api.ClusterNode{}, err
	}
	ids := make([]string, len(hosted))
	for i, p := range hosted {
		ids[i] = p.ID
	}
	sort.Strings(ids)
	r := room{hosted: hosted}
	r.memory, r.disk, r.ports = store.NodeRoom(&n, hosted, planMemory)
	v := nodeView(NodeView{Node: n, Projects: ids}, r)
	v.Status, v.Role = api.NodeStatusAlive, api.NodeRoleNone
	return v, nil
}

// Capacity is the machine's memory and the data directory's filesystem's size (bytes; 0 when unknown):
// what a node registers.
func Capacity(dataDir string) (memory, disk int64) { return capacity(dataDir) }

// room is what a node's projects leave of its capacity (store.NodeRoom).
type room struct {
	hosted       []*store.Project
	memory, disk int64
	ports        int
}

// roomsOf measures each listed node's room, in the list's order.
func roomsOf(db *store.DB, list []NodeView, planMemory func(plan string) int64) ([]room, error) {
	out := make([]room, len(list))
	err := db.View(func(tx *store.Tx) error {
		for i, n := range list {
			for _, id := range n.Projects {
				p, err := store.Projects.Get(tx, id)
				if errors.Is(err, store.ErrNotFound) {
					continue
				} else if err != nil {
					return err
				}
				out[i].hosted = append(out[i].hosted, p)
			}
			out[i].memory, out[i].disk, out[i].ports = store.NodeRoom(&n.Node, out[i].hosted, planMemory)
		}
		return nil
	})
	return out, err
}

// nodeView is the wire form of a listed node and its room (status and role unset).
func nodeView(n NodeView, r room) api.ClusterNode {
	return api.ClusterNode{ID: n.ID, Name: n.Name, Advertise: n.Advertise, APIURL: n.APIURL, PublicHost: n.PublicHost,
		EtcdMemberID: n.EtcdMemberID, ClientURL: n.ClientURL, PeerURL: n.PeerURL, JoinURL: n.JoinURL, Version: n.Version,
		State: n.State, Role: api.NodeRoleNone, JoinedAt: n.JoinedAt, LastSeenAt: n.LastSeenAt,
		MemoryBytes: n.MemoryBytes, DiskBytes: n.DiskBytes, PortsFirst: n.PortsFirst, PortsLast: n.PortsLast,
		MemoryFreeBytes: r.memory, DiskFreeBytes: r.disk, PortsFree: r.ports, Projects: n.Projects,
		KVRESPPort: n.KVRESPPort, KVRESTURL: n.KVRESTURL}
}

// ListNodes lists the nodes with the projects each hosts: a project's NodeID, or the node that formed
// the cluster for a project with none (every project of the single-node appliance it was).
func ListNodes(db *store.DB) ([]NodeView, error) {
	var out []NodeView
	err := db.View(func(tx *store.Tx) error {
		nodes, err := store.Nodes.All(tx, nil)
		if err != nil {
			return err
		}
		projects, err := store.Projects.All(tx, func(p *store.Project) bool { return p.DeletedAt == nil })
		if err != nil {
			return err
		}
		byNode := map[string][]string{}
		for _, p := range projects {
			n := store.ProjectNode(tx, p)
			byNode[n] = append(byNode[n], p.ID)
		}
		for _, n := range nodes {
			v := NodeView{Node: *n, Projects: byNode[n.ID]}
			if v.Projects == nil {
				v.Projects = []string{}
			}
			out = append(out, v)
		}
		return nil
	})
	sort.Slice(out, func(i, j int) bool { return out[i].JoinedAt.Before(out[j].JoinedAt) })
	return out, err
}

// ErrNodeHasProjects is RemoveNode's refusal of a node that still hosts projects.
var ErrNodeHasProjects = errors.New("the node still hosts projects")

// RemoveNode removes a node: its etcd member, then its record. A node that hosts projects is refused
// (the error lists them): they must move first. self is the node the caller runs on, which cannot remove
// itself (its member would stop answering the caller).
func RemoveNode(ctx context.Context, c *clientv3.Client, db *store.DB, self, id string) (*store.Node, error) {
	nodes, err := ListNodes(db)
	if err != nil {
		return nil, err
	}
	var node *NodeView
	for i := range nodes {
		if nodes[i].ID == id {
			node = &nodes[i]
		}
	}
	if node == nil {
		return nil, fmt.Errorf("no node %s in this cluster (appliance cluster nodes lists them)", id)
	}
	if id == self {
		return nil, fmt.Errorf("node %s is this one: remove it from another node", id)
	}
	if len(node.Projects) > 0 {
		return nil, fmt.Errorf("%w: node %s hosts %d project(s): %s; move them to other nodes first", ErrNodeHasProjects, id, len(node.Projects), strings.Join(node.Projects, ", "))
	}
	if node.EtcdMemberID != "" {
		mid, err := strconv.ParseUint(node.EtcdMemberID, 16, 64)
		if err != nil {
			return nil, fmt.Errorf("node %s: its member id %q: %w", id, node.EtcdMemberID, err)
		}
		err = retryUnhealthy(ctx, func(ctx context.Context) error {
			_, err := c.MemberRemove(ctx, mid)
			return err
		})
		if err != nil && !strings.Contains(err.Error(), "member not found") {
			return nil, fmt.Errorf("remove node %s's etcd member: %w", id, err)
		}
	}
	// The members just changed: the cluster may be electing its leader, and a commit then times out (its
	// outcome unknown). The record's removal is tried again for 30 s (it is idempotent: a record already
	// gone, by an attempt that did commit, is what it wants).
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := db.Update(func(tx *store.Tx) error {
			// Its certificate is refused from now on (the nodes' mutual-TLS channel checks the list).
			if node.CertSerial != "" && !store.PeerCertRevoked(tx, node.CertSerial) {
				if err := tx.SetMeta(store.MetaRevokedPeerCerts, strings.TrimSpace(tx.Meta(store.MetaRevokedPeerCerts)+" "+node.CertSerial)); err != nil {
					return err
				}
			}
			if err := store.Nodes.Delete(tx, id); err != nil && !errors.Is(err, store.ErrNotFound) {
				return err
			}
			return nil
		})
		if err == nil {
			return &node.Node, nil
		}
		if !errors.Is(err, store.ErrUnavailable) || time.Now().After(deadline) {
			return nil, fmt.Errorf("remove node %s's record (its etcd member is removed): %w", id, err)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("remove node %s's record (its etcd member is removed): %w", id, err)
		case <-time.After(time.Second):
		}
	}
}

// Status is /status's cluster section: the members as this node's member knows them, the leader, and
// whether a write can commit now (a linearizable read through this member answered).
func (m *Member) Status(ctx context.Context) *api.ClusterStatus {
	srv := m.srv.Etcd().Server
	lead := srv.Leader()
	st := &api.ClusterStatus{Node: m.cfg.NodeID, Members: []api.ClusterMember{}}
	for _, mem := range srv.Cluster().Members() {
		cm := api.ClusterMember{Name: mem.Name, ID: memberIDHex(uint64(mem.ID)), Learner: mem.IsLearner, Leader: mem.ID == lead}
		if len(mem.PeerURLs) > 0 {
			cm.PeerURL = mem.PeerURLs[0]
		}
		if len(mem.ClientURLs) > 0 {
			cm.ClientURL = mem.ClientURLs[0]
		}
		if cm.Leader {
			st.Leader = mem.Name
		}
		st.Members = append(st.Members, cm)
	}
	sort.Slice(st.Members, func(i, j int) bool { return st.Members[i].Name < st.Members[j].Name })
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if _, err := m.client.Get(rctx, Prefix+"v/", clientv3.WithCountOnly()); err != nil {
		st.Message = fmt.Sprintf("no quorum: a linearizable read through this node's member failed (%v): fewer than a majority of the %d members answer", err, len(st.Members))
	} else {
		st.Quorum = true
	}
	return st
}

// retryUnhealthy runs a membership change (each try bounded), again while etcd refuses it as "unhealthy
// cluster" — a member it has is not connected for a few seconds yet (one that just started or was
// promoted) — for up to 30 s.
func retryUnhealthy(ctx context.Context, fn func(context.Context) error) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		rctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		err := fn(rctx)
		cancel()
		if err == nil || !errors.Is(err, rpctypes.ErrUnhealthy) || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(time.Second):
		}
	}
}

// certSerial is the serial number (hex) of the first certificate of the PEM file path.
func certSerial(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	return pemSerial(b)
}

// pemSerial is the serial number (hex) of the first certificate of certPEM.
func pemSerial(certPEM []byte) (string, error) {
	blk, _ := pem.Decode(certPEM)
	if blk == nil {
		return "", errors.New("no PEM certificate")
	}
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		return "", err
	}
	return c.SerialNumber.Text(16), nil
}
