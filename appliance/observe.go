package appliance

import "github.com/theappliance/appliance/appliance/observe"

// The observability area lives in appliance/observe (the live snapshot, the sampler and its history and
// statement snapshots, the alerts, the server's logs, the index advisor); the service holds it, built in
// New, and routes to it its periodic tasks, the backup jobs' ends and the servers' crashes.

// LogsQuery is what GET .../logs and .../logs/stream ask for (httpapi builds it).
type LogsQuery = observe.LogsQuery

// Observe is the observability area: httpapi's observability, alerts, logs and advisor routes call its
// methods; /metrics reads its sampler's figures.
func (s *Service) Observe() *observe.Service { return s.observe }

// newObserve builds the area with the service's collaborators (New).
func (s *Service) newObserve(cfg Config, deps Deps) *observe.Service {
	return observe.New(observe.Config{LogArchiveDays: cfg.LogArchiveDays},
		observe.Deps{DB: deps.DB, Log: deps.Log, Clock: s.now, Host: areaHost{s}})
}
