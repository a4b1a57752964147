package api

import "time"

// Health is GET /healthz.
type Health struct {
	Service string `json:"service"`
	Status  string `json:"status" enum:"HealthStatus" doc:"ok when the process serves requests and its metadata store answers; degraded (still 200) when it is short of disk space and refuses writes (see /status); otherwise down (503)"`
}

// Component is one row of the status page.
type Component struct {
	Name    string `json:"name"`
	Status  string `json:"status" enum:"ComponentStatus"`
	Message string `json:"message"`
}

// RegionStatus is the status of a region served by this appliance.
type RegionStatus struct {
	Region string `json:"region"`
	Status string `json:"status"`
}

// Status is GET /status.
type Status struct {
	Service     string         `json:"service"`
	Status      string         `json:"status" enum:"ComponentStatus" doc:"operational when every component is, down when any is down, otherwise degraded"`
	Components  []Component    `json:"components"`
	Regions     []RegionStatus `json:"regions"`
	UpdatedAt   time.Time      `json:"updated_at"`
	GeneratedAt time.Time      `json:"generated_at"`
	// DataDirReflinks is whether the data directory's filesystem has reflinks (probed at start): previews,
	// restores and base backups then copy files by reflink. An operator's detail: absent from the public status.
	DataDirReflinks *bool `json:"data_dir_reflinks,omitempty" doc:"whether the data directory's filesystem copies files by reflink (XFS with reflink=1, btrfs), probed when the appliance starts: previews, restores and base backups then take about constant time; absent from the public status"`
	// Cluster is the etcd cluster of a cluster node's (absent on a single-node appliance).
	Cluster *ClusterStatus `json:"cluster,omitempty" doc:"the etcd cluster the metadata lives in, as this node sees it; absent on a single-node appliance (bbolt)"`
}

// ClusterStatus is /status's cluster section.
type ClusterStatus struct {
	Node    string          `json:"node" doc:"this node's id"`
	Members []ClusterMember `json:"members"`
	Leader  string          `json:"leader" doc:"the name of the etcd member this node knows as the leader; empty when it knows none (no quorum, or an election under way)"`
	Quorum  bool            `json:"quorum" doc:"whether a write can commit now: a linearizable read through this node's member answered within the status check's time"`
	Message string          `json:"message" doc:"why there is no quorum (empty when there is)"`
}

// ClusterMember is one etcd member of the cluster.
type ClusterMember struct {
	Name      string `json:"name"`
	ID        string `json:"id" doc:"the etcd member id (hex)"`
	PeerURL   string `json:"peer_url,omitempty" doc:"absent from the public status"`
	ClientURL string `json:"client_url,omitempty" doc:"absent from the public status"`
	Learner   bool   `json:"learner" doc:"a member added and not yet caught up (it does not vote)"`
	Leader    bool   `json:"leader"`
}

// Public is the status for anyone: each component's name and status, and a message that tells nothing
// of the machine (paths, process counts, other organizations' webhooks): the details are an operator's
// (the API's /status with the metrics token, or the operator listener).
func (st *Status) Public() *Status {
	out := *st
	out.DataDirReflinks = nil
	if st.Cluster != nil {
		c := *st.Cluster
		c.Members = make([]ClusterMember, len(st.Cluster.Members))
		for i, m := range st.Cluster.Members {
			m.PeerURL, m.ClientURL = "", ""
			c.Members[i] = m
		}
		if !c.Quorum {
			c.Message = "no quorum: the appliance's operator sees why"
		}
		out.Cluster = &c
	}
	out.Components = make([]Component, len(st.Components))
	for i, c := range st.Components {
		msg := c.Status
		if c.Status != StatusOperational {
			msg += ": the appliance's operator sees why"
		}
		out.Components[i] = Component{Name: c.Name, Status: c.Status, Message: msg}
	}
	return &out
}

// Component statuses.
const (
	StatusOperational = "operational"
	StatusDegraded    = "degraded"
	StatusDown        = "down"
)
