package appliance

import (
	"context"
	"os"
	"sync"
	"time"
)

// Component statuses.
const (
	StatusOperational = "operational"
	StatusDegraded    = "degraded"
	StatusDown        = "down"
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

// Health is GET /healthz.
type Health struct {
	Service string `json:"service"`
	Status  string `json:"status" doc:"ok when the process serves requests and its metadata store answers; degraded (still 200) when it is short of disk space and refuses writes (see /status); otherwise down (503)"`
}

// Component is one row of the status page.
type Component struct {
	Name    string `json:"name"`
	Status  string `json:"status" doc:"operational, degraded or down"`
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
	Status      string         `json:"status" doc:"operational when every component is, down when any is down, otherwise degraded"`
	Components  []Component    `json:"components"`
	Regions     []RegionStatus `json:"regions"`
	UpdatedAt   time.Time      `json:"updated_at"`
	GeneratedAt time.Time      `json:"generated_at"`
}

const serviceName = "appliance"

// Healthz is a cheap liveness answer that still proves the store is readable.
func (s *Service) Healthz(ctx context.Context) (*Health, error) {
	if err := s.db.Ping(); err != nil {
		return nil, &Error{Kind: KindUnavailable, Msg: "metadata store unavailable", Cause: err}
	}
	d := s.Disk()
	if d.WriteErr != nil {
		return nil, &Error{Kind: KindUnavailable, Msg: "metadata store refuses writes", Cause: d.WriteErr}
	}
	if d.Low {
		return &Health{Service: serviceName, Status: StatusDegraded}, nil
	}
	return &Health{Service: serviceName, Status: "ok"}, nil
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
	if err := s.db.Ping(); err != nil {
		storeStatus, storeMsg = StatusDown, err.Error()
	}
	out.Components = append(out.Components, Component{Name: "store", Status: storeStatus, Message: storeMsg})
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
	out.UpdatedAt = out.GeneratedAt
	return out
}

// Public is the status for anyone: each component's name and status, and a message that tells nothing
// of the machine (paths, process counts, other organizations' webhooks): the details are an operator's
// (the API's /status with the metrics token, or the operator listener).
func (st *Status) Public() *Status {
	out := *st
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
