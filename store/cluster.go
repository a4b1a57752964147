package store

import (
	"strings"
	"time"
)

// Node is an appliance of a cluster (store on etcd): each registers itself as it starts and refreshes its
// record (LastSeenAt, Version) while it runs. A single-node appliance on bbolt has no node records.
type Node struct {
	ID         string `json:"id"`          // nod_…
	Name       string `json:"name"`        // its etcd member's name
	Advertise  string `json:"advertise"`   // the host (IP or name) the other nodes reach it at (--advertise)
	APIURL     string `json:"api_url"`     // its HTTPS API
	PublicHost string `json:"public_host"` // the host its projects' connection URLs name (--public-host)
	// EtcdMemberID is its etcd member's ID (hex), ClientURL and PeerURL the member's URLs, JoinURL where
	// it serves joins (https://advertise:join port).
	EtcdMemberID string `json:"etcd_member_id"`
	ClientURL    string `json:"client_url"`
	PeerURL      string `json:"peer_url"`
	JoinURL      string `json:"join_url"`
	// Capacity: the machine's memory and the data directory's disk (bytes), and its instances' port range.
	MemoryBytes int64 `json:"memory_bytes"`
	DiskBytes   int64 `json:"disk_bytes"`
	PortsFirst  int   `json:"ports_first"`
	PortsLast   int   `json:"ports_last"`
	// State is what the node's record says: joining (a member added, not yet started), active (it
	// started and registered). Liveness (leases) is not in the record.
	State      string    `json:"state"`
	Version    string    `json:"version"`
	JoinedAt   time.Time `json:"joined_at"`
	LastSeenAt time.Time `json:"last_seen_at"`
	// KVRESPPort and KVRESTURL are its key-value fronts (the RESP front's port on PublicHost, the REST
	// front's base URL), which its projects' key-value credentials name (0, "": none).
	KVRESPPort int    `json:"kv_resp_port,omitempty"`
	KVRESTURL  string `json:"kv_rest_url,omitempty"`
	// CertSerial is the serial number (hex) of the node's certificate (mutual TLS between the nodes): at
	// its removal it goes to the store's meta MetaRevokedPeerCerts, and the nodes refuse it.
	CertSerial string `json:"cert_serial,omitempty"`
}

// MetaRevokedPeerCerts keys, in the store's meta, the serial numbers (hex, space-separated) of the
// certificates of the nodes removed from the cluster: the nodes' mutual-TLS channel refuses them.
const MetaRevokedPeerCerts = "cluster/revoked_peer_certs"

// PeerCertRevoked reports, in tx, whether the node certificate of serial (hex) was revoked.
func PeerCertRevoked(tx *Tx, serial string) bool {
	for _, s := range strings.Fields(tx.Meta(MetaRevokedPeerCerts)) {
		if s == serial {
			return true
		}
	}
	return false
}

// Node states.
const (
	NodeJoining = "joining"
	NodeActive  = "active"
	// NodeDraining: its projects are being moved away before its removal (cluster remove-node); it
	// takes no new project.
	NodeDraining = "draining"
)

// JoinToken lets one node join the cluster: single use, expiring; only the secret's SHA-256 is kept.
type JoinToken struct {
	ID         string     `json:"id"` // jtk_…
	SecretHash string     `json:"secret_hash"`
	CreatedAt  time.Time  `json:"created_at"`
	ExpiresAt  time.Time  `json:"expires_at"`
	UsedAt     *time.Time `json:"used_at"`
	UsedBy     string     `json:"used_by"` // the node that joined with it
}

var (
	Nodes = newTable("nodes", func(r *Node) string { return r.ID })
	// NodesByName files nodes under their etcd member's name.
	NodesByName = Nodes.index("name", func(r *Node) []string { return nonEmpty(r.Name) })

	JoinTokens = newTable("join_tokens", func(r *JoinToken) string { return r.ID })
)

// MetaFormedBy is the meta value naming the node that formed the cluster (cluster init), which holds every
// project of the single-node appliance it was.
const MetaFormedBy = "cluster_formed_by"

// ProjectNode is the node that hosts p's instances: its NodeID, or the node that formed the cluster for a
// project with none ("" on a single node, whose store names no node).
func ProjectNode(tx *Tx, p *Project) string {
	if p.NodeID != "" {
		return p.NodeID
	}
	return tx.Meta(MetaFormedBy)
}

// SetNode names the cluster node this process is, before the store is used (cluster.StartMember): Local
// then tells its projects and instances from the other nodes'. Never called on a single node.
func (db *DB) SetNode(id string) { db.node = id }

// Node is the cluster node this process is ("" on a single node).
func (db *DB) Node() string { return db.node }

// Local reports whether p's instances live on this process's node (ProjectNode): always on a single node.
// A node's own work (its supervisor's adoption, the sampler, log housekeeping, idle suspension, key-value
// snapshots) looks only at its local projects.
func Local(tx *Tx, p *Project) bool {
	return tx.db.node == "" || ProjectNode(tx, p) == tx.db.node
}

// LocalInstance reports whether the instance lives on this process's node: its project's (Local), or for
// a spare (no project) the node that made it (its NodeID; a spare of no node is the forming node's).
func LocalInstance(tx *Tx, in *Instance) bool {
	if tx.db.node == "" {
		return true
	}
	if in.ProjectID != "" {
		return LocalProject(tx, in.ProjectID)
	}
	if in.NodeID != "" {
		return in.NodeID == tx.db.node
	}
	return tx.Meta(MetaFormedBy) == tx.db.node
}

// LocalProject is Local of the project of that id (false when there is none, in a cluster).
func LocalProject(tx *Tx, projectID string) bool {
	if tx.db.node == "" {
		return true
	}
	p, err := Projects.Get(tx, projectID)
	return err == nil && Local(tx, p)
}

// NodeRoom is the room a node's projects (hosted: those whose ProjectNode is n) leave of its capacity, as
// placement counts it: its memory minus their plans' memory (planMemory), its disk minus their storage
// limits, its port range minus two ports each (direct and pooled). A node with no port range has none free.
func NodeRoom(n *Node, hosted []*Project, planMemory func(plan string) int64) (memoryFree, diskFree int64, portsFree int) {
	memoryFree, diskFree = n.MemoryBytes, n.DiskBytes
	if n.PortsFirst != 0 {
		portsFree = n.PortsLast - n.PortsFirst + 1
	}
	for _, p := range hosted {
		memoryFree -= planMemory(p.Plan)
		diskFree -= p.StorageLimitBytes
		portsFree -= 2
	}
	return memoryFree, diskFree, portsFree
}
