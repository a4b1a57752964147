package appliance

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/theappliance/appliance/api"
)

// Check reports one component's health.
type Check func(ctx context.Context) (status, message string)

// Probes holds the health checks of the running components, in registration order.
type Probes struct {
	mu     sync.Mutex
	names  []string
	checks map[string]Check
}

// Register adds (or replaces) a component check.
func (p *Probes) Register(name string, c Check) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.checks == nil {
		p.checks = map[string]Check{}
	}
	if _, ok := p.checks[name]; !ok {
		p.names = append(p.names, name)
	}
	p.checks[name] = c
}

const serviceName = "appliance"

// Healthz is a cheap liveness answer that still proves the store is readable.
func (s *Service) Healthz(ctx context.Context) (*Health, error) {
	if err := s.db.Ping(); err != nil {
		return nil, &Error{Kind: KindUnavailable, Msg: "metadata store unavailable", Cause: err}
	}
	d := s.storage.Disk()
	if d.WriteErr != nil {
		return nil, &Error{Kind: KindUnavailable, Msg: "metadata store refuses writes", Cause: d.WriteErr}
	}
	if d.Low {
		return &Health{Service: serviceName, Status: StatusDegraded}, nil
	}
	return &Health{Service: serviceName, Status: api.HealthOK}, nil
}

// Status runs every component check.
func (s *Service) Status(ctx context.Context) *Status {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	s.Probe.mu.Lock()
	names := append([]string{}, s.Probe.names...)
	checks := make([]Check, len(names))
	for i, n := range names {
		checks[i] = s.Probe.checks[n]
	}
	s.Probe.mu.Unlock()
	out := &Status{Service: serviceName, Status: StatusOperational, Components: []Component{}, GeneratedAt: s.now()}
	storeStatus, storeMsg := StatusOperational, "bbolt metadata store at "+s.db.Path()
	if s.db.Path() == "" {
		storeMsg = "metadata store on the cluster's etcd"
	}
	var cluster *Component
	if s.Cluster != nil {
		// First: without a quorum, reading the store would wait for its whole timeout.
		out.Cluster = s.Cluster(ctx)
		cluster = &Component{Name: "cluster", Status: StatusOperational, Message: fmt.Sprintf("%d members, leader %s", len(out.Cluster.Members), out.Cluster.Leader)}
		if !out.Cluster.Quorum {
			cluster.Status, cluster.Message = StatusDown, out.Cluster.Message
			storeStatus, storeMsg = StatusDown, "the metadata store on the cluster's etcd refuses reads and writes: "+out.Cluster.Message
		}
	}
	if storeStatus == StatusOperational {
		if err := s.db.Ping(); err != nil {
			storeStatus, storeMsg = StatusDown, err.Error()
		}
	}
	out.Components = append(out.Components, Component{Name: "store", Status: storeStatus, Message: storeMsg})
	if cluster != nil {
		out.Components = append(out.Components, *cluster)
	}
	for i, c := range checks {
		st, msg := c(ctx)
		out.Components = append(out.Components, Component{Name: names[i], Status: st, Message: msg})
	}
	for _, c := range out.Components {
		switch {
		case c.Status == StatusDown:
			out.Status = StatusDown
		case c.Status != StatusOperational && out.Status == StatusOperational:
			out.Status = StatusDegraded
		}
	}
	out.Regions = []RegionStatus{{Region: s.cfg.Region, Status: out.Status}}
	if s.dp != nil {
		reflinks := s.reflinks
		out.DataDirReflinks = &reflinks
	}
	out.UpdatedAt = out.GeneratedAt
	return out
}

// CACertificate is the PEM of the appliance's CA certificate (what clients verify servers against).
func (s *Service) CACertificate() ([]byte, error) {
	if s.cfg.CACertPath == "" {
		return nil, NotFound("this appliance has no CA certificate")
	}
	b, err := os.ReadFile(s.cfg.CACertPath)
	if err != nil {
		return nil, Internal(err, "read the CA certificate")
	}
	return b, nil
}
