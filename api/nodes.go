package api

import "time"

// Node states (ClusterNode.Status): what the cluster knows of a node now.
const (
	NodeStatusAlive       = "alive"       // active, and its liveness key (bound to the lease it renews) is there
	NodeStatusJoining     = "joining"     // a member added, the node not started and registered yet
	NodeStatusUnavailable = "unavailable" // active, but its lease lapsed: down, cut off, or stopped
	NodeStatusDraining    = "draining"    // alive, its projects being moved away before its removal (it takes no new one)
)

// Etcd member roles (ClusterNode.Role).
const (
	NodeRoleVoter   = "voter"
	NodeRoleLearner = "learner"
	NodeRoleNone    = "none" // a single node (no etcd), or a record whose member the cluster does not list
)

// NodeList is GET /v1/nodes.
type NodeList struct {
	Clustered bool          `json:"clustered" doc:"whether this appliance is a cluster of nodes on embedded etcd; false: a single node, listed alone (its id is empty)"`
	Node      string        `json:"node" doc:"the id of the node that answered (empty on a single node)"`
	Nodes     []ClusterNode `json:"nodes" doc:"the nodes, in the order they joined"`
}

// ClusterNode is one node as GET /v1/nodes and appliance cluster nodes list it.
type ClusterNode struct {
	ID           string    `json:"id" doc:"the node's id (nod_…); empty on a single node"`
	Name         string    `json:"name" doc:"its etcd member's name (empty on a single node)"`
	Advertise    string    `json:"advertise" doc:"the host the other nodes reach it at (up --advertise)"`
	APIURL       string    `json:"api_url"`
	PublicHost   string    `json:"public_host" doc:"the host its projects' connection URLs name (up --public-host)"`
	EtcdMemberID string    `json:"etcd_member_id" doc:"its etcd member's id (hex)"`
	ClientURL    string    `json:"client_url"`
	PeerURL      string    `json:"peer_url"`
	JoinURL      string    `json:"join_url"`
	Version      string    `json:"version"`
	State        string    `json:"state" doc:"what its record says: joining (a member added, not started yet) or active (it started and registered)"`
	Liveness     string    `json:"liveness,omitempty" doc:"alive when its liveness key is there now, else down (read from the cluster's leases; absent on a single node)"`
	Status       string    `json:"status" enum:"NodeStatus" doc:"record and liveness together: alive, joining, draining (its projects moved away before its removal; it takes no new project), or unavailable (its lease lapsed)"`
	Role         string    `json:"role" enum:"NodeRole" doc:"its etcd member's role: voter, learner (added, not caught up, does not vote), none (a single node, or no such member now)"`
	Leader       bool      `json:"leader" doc:"its etcd member is the raft leader as the answering node's member knows it"`
	JoinedAt     time.Time `json:"joined_at"`
	LastSeenAt   time.Time `json:"last_seen_at" doc:"when it last started and registered"`
	// LeaseTTLSeconds and HeartbeatAgeSeconds are read from its lease (etcd's TimeToLive).
	LeaseTTLSeconds     *int64 `json:"lease_ttl_seconds,omitempty" doc:"seconds its liveness lease has left (absent: no lease now, or a single node)"`
	HeartbeatAgeSeconds *int64 `json:"heartbeat_age_seconds,omitempty" doc:"seconds since etcd last renewed its lease: the lease's granted TTL minus what it has left (absent: no lease now, or a single node)"`
	MemoryBytes         int64  `json:"memory_bytes" doc:"the machine's memory (0: unknown)"`
	DiskBytes           int64  `json:"disk_bytes" doc:"the size of its data directory's filesystem (0: unknown)"`
	PortsFirst          int    `json:"ports_first"`
	PortsLast           int    `json:"ports_last"`
	// MemoryFreeBytes, DiskFreeBytes and PortsFree are as placement computes them.
	MemoryFreeBytes int64    `json:"memory_free_bytes" doc:"memory minus its projects' plans' memory, as placement counts it (negative: overcommitted)"`
	DiskFreeBytes   int64    `json:"disk_free_bytes" doc:"disk minus its projects' storage limits, as placement counts it (negative: overcommitted)"`
	PortsFree       int      `json:"ports_free" doc:"ports of its range minus two per project (direct and pooled), as placement counts them"`
	Projects        []string `json:"projects" doc:"the ids of the projects it hosts (previews included, deleted ones not)"`
	KVRESPPort      int      `json:"kv_resp_port,omitempty"`
	KVRESTURL       string   `json:"kv_rest_url,omitempty"`
}
