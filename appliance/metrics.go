package appliance

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance/observe"
	"github.com/theappliance/appliance/store"
)

// serviceMetrics counts, since the process started, what /metrics shows of the service's own work.
type serviceMetrics struct {
	mu       sync.Mutex
	jobs     map[[2]string]*Counter // job type, end state
	webhooks map[[2]string]*Counter // attempt result (success, failure), ""
}

// Counter is a count and the seconds the counted things took.
type Counter struct {
	Count   uint64
	Seconds float64
}

func (m *serviceMetrics) add(table *map[[2]string]*Counter, key [2]string, d time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if *table == nil {
		*table = map[[2]string]*Counter{}
	}
	c := (*table)[key]
	if c == nil {
		c = &Counter{}
		(*table)[key] = c
	}
	c.Count++
	c.Seconds += d.Seconds()
}

// jobEndedMetric counts a job's end (its run time from start to completion).
func (s *Service) jobEndedMetric(j *store.Job) {
	var d time.Duration
	if j.StartedAt != nil && j.CompletedAt != nil {
		d = j.CompletedAt.Sub(*j.StartedAt)
	}
	s.metrics.add(&s.metrics.jobs, [2]string{j.Type, j.State}, d)
}

// webhookAttemptMetric counts a delivery attempt.
func (s *Service) webhookAttemptMetric(ok bool, d time.Duration) {
	result := "failure"
	if ok {
		result = "success"
	}
	s.metrics.add(&s.metrics.webhooks, [2]string{result}, d)
}

// JobMetric is the count and total run time of one job type's ends in one state.
type JobMetric struct {
	Type, State string
	Counter
}

// ProjectGauges is a project's newest history sample (nil before the first).
type ProjectGauges struct {
	ProjectID, OrganizationID, Name string
	Sample                          *ObservabilitySample
}

// Metrics is what /metrics shows of the service.
type Metrics struct {
	Jobs            []JobMetric
	JobsByState     map[string]int // jobs in the store by state now
	WebhookAttempts map[string]Counter
	Sampler         observe.SampleSweepResult
	SamplerSweeps   int64
	// Projects are the projects this node hosts (every one on a single node; in a cluster those whose
	// store.ProjectNode is this node: another node's are that node's series).
	Projects []ProjectGauges
	// Node is this cluster node's record (nil on a single node) and Cluster the cluster as its member
	// sees it (nil on a single node).
	Node    *store.Node
	Cluster *api.ClusterStatus
}

// Metrics gathers the counters and, for every active project this node hosts, its newest sample; in a
// cluster, this node's record and the cluster's members, quorum and leader.
func (s *Service) Metrics(ctx context.Context) (*Metrics, error) {
	m := &Metrics{JobsByState: map[string]int{}, WebhookAttempts: map[string]Counter{}}
	s.metrics.mu.Lock()
	for k, c := range s.metrics.jobs {
		m.Jobs = append(m.Jobs, JobMetric{Type: k[0], State: k[1], Counter: *c})
	}
	for k, c := range s.metrics.webhooks {
		m.WebhookAttempts[k[0]] = *c
	}
	s.metrics.mu.Unlock()
	slices.SortFunc(m.Jobs, func(a, b JobMetric) int { return cmp.Or(cmp.Compare(a.Type, b.Type), cmp.Compare(a.State, b.State)) })
	m.Sampler, m.SamplerSweeps = s.observe.SamplerStats()
	if s.Cluster != nil {
		m.Cluster = s.Cluster(ctx)
	}
	err := s.db.View(func(tx *store.Tx) error {
		if s.cfg.NodeID != "" {
			n, err := store.Nodes.Get(tx, s.cfg.NodeID)
			if err != nil && !errors.Is(err, store.ErrNotFound) {
				return err
			}
			if n == nil { // not registered yet: its id alone
				n = &store.Node{ID: s.cfg.NodeID}
			}
			m.Node = n
		}
		for _, st := range []string{"pending", "running"} {
			n, err := store.Jobs.Count(tx, store.JobsByState, st)
			if err != nil {
				return err
			}
			m.JobsByState[st] = n
		}
		prjs, err := store.Projects.All(tx, func(p *store.Project) bool {
			return p.State == ProjectActive && p.PreviewOf == "" && (s.cfg.NodeID == "" || store.ProjectNode(tx, p) == s.cfg.NodeID)
		})
		if err != nil {
			return err
		}
		for _, p := range prjs {
			g := ProjectGauges{ProjectID: p.ID, OrganizationID: p.OrganizationID, Name: p.Name}
			g.Sample = observe.LastSample(tx, p.ID)
			m.Projects = append(m.Projects, g)
		}
		return nil
	})
	return m, err
}
