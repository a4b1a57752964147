package appliance

import (
	"context"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance/apperr"
	"github.com/theappliance/appliance/appliance/cluster"
	"github.com/theappliance/appliance/store"
)

// ListNodes is GET /v1/nodes: the cluster's nodes as appliance cluster nodes lists them (cluster.Nodes,
// read from the store and etcd: every node answers the same), or on a single node that node alone
// (cluster.LocalNode: no id, no etcd member, every project its own) — docs/api-decisions.md "The nodes
// of a cluster in the API". Platform operators only.
func (s *Service) ListNodes(ctx context.Context, p *Principal) (*api.NodeList, error) {
	if err := p.RequireOperator("listing the nodes"); err != nil {
		return nil, err
	}
	planMemory := func(plan string) int64 { return s.planOrDefault(plan).MemoryBytes }
	if s.NodeList != nil {
		nodes, err := s.NodeList(ctx, planMemory)
		if err != nil {
			return nil, &apperr.Error{Kind: apperr.KindUnavailable, Msg: "the cluster's nodes cannot be read now (no quorum, or this node's etcd member does not answer): see /status", Cause: err}
		}
		return &api.NodeList{Clustered: true, Node: s.cfg.NodeID, Nodes: nodes}, nil
	}
	mem, disk := cluster.Capacity(s.cfg.DataDir)
	n := store.Node{PublicHost: s.cfg.PublicHost, Version: s.cfg.Version, MemoryBytes: mem, DiskBytes: disk,
		PortsFirst: s.cfg.Ports.First, PortsLast: s.cfg.Ports.Last, State: store.NodeActive}
	v, err := cluster.LocalNode(s.db, n, planMemory)
	if err != nil {
		return nil, Internal(err, "list the projects of this node")
	}
	return &api.NodeList{Nodes: []api.ClusterNode{v}}, nil
}
