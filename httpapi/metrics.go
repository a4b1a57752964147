package httpapi

import (
	"bufio"
	"cmp"
	"context"
	"crypto/subtle"
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance"
)

// httpStats counts the requests each route answered, by status, and the time they took.
type httpStats struct {
	mu   sync.Mutex
	reqs map[reqKey]*appliance.Counter
}

type reqKey struct{ method, route, code string }

// observe records a route's answer (deferred by adapt: the status is the one written, 200 when none).
func (st *httpStats) observe(rt *Route, w http.ResponseWriter, start time.Time) {
	code := http.StatusOK
	if j, ok := w.(*jsonErrors); ok && j.status != 0 {
		code = j.status
	}
	k := reqKey{rt.Method, rt.Path, strconv.Itoa(code)}
	d := time.Since(start).Seconds()
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.reqs == nil {
		st.reqs = map[reqKey]*appliance.Counter{}
	}
	c := st.reqs[k]
	if c == nil {
		c = &appliance.Counter{}
		st.reqs[k] = c
	}
	c.Count++
	c.Seconds += d
}

// operatorKey marks a request that came in on the operator listener (OperatorHandler).
type operatorKey struct{}

// OperatorHandler serves /metrics and /status with each component's details, for a listener of their
// own (up --metrics-listen) that only operators reach: it answers any client there (with the metrics
// token when one is set). Other paths are 404.
func (s *Server) OperatorHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" && r.URL.Path != "/status" {
			writeJSON(w, http.StatusNotFound, errorBody{Error: "the operator listener serves /metrics and /status only"})
			return
		}
		s.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), operatorKey{}, true)))
	})
}

// operatorAccess is nil when r may read what is the operator's (/metrics, /status's details): with a
// metrics token, a request bearing it; without one, a request on the operator listener, or — when
// loopback is set and no operator listener exists — a loopback client. (A reverse proxy on the same
// machine makes every client a loopback one: then use the operator listener or the token.)
func (s *Server) operatorAccess(r *http.Request, loopback bool) error {
	if s.metricsToken != "" {
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || subtle.ConstantTimeCompare([]byte(got), []byte(s.metricsToken)) != 1 {
			return &appliance.Error{Kind: appliance.KindUnauthenticated, Msg: r.URL.Path + " needs the metrics token (up --metrics-token) as a bearer token"}
		}
		return nil
	}
	if on, _ := r.Context().Value(operatorKey{}).(bool); on {
		return nil
	}
	if s.operatorListener {
		return appliance.Forbidden("%s is served on the operator listener (up --metrics-listen), or here with a metrics token (up --metrics-token)", r.URL.Path)
	}
	if ip, err := netip.ParseAddr(clientIP(r)); !loopback || err != nil || !ip.Unmap().IsLoopback() {
		return appliance.Forbidden("%s answers loopback clients only unless a metrics token is set (up --metrics-token)", r.URL.Path)
	}
	return nil
}

// metrics answers /metrics in the Prometheus text format: the appliance's own metrics and each active
// project's core gauges from its newest sample, to operators (operatorAccess; docs/api-decisions.md
// "Observability").
func (s *Server) metrics(r *Request) error {
	if err := s.operatorAccess(r.Request, true); err != nil {
		return err
	}
	m, err := s.svc.Metrics(r.Context())
	if err != nil {
		return appliance.Internal(err, "gather metrics")
	}
	r.W.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	bw := bufio.NewWriter(r.W)
	p := promWriter{w: bw}

	s.stats.mu.Lock()
	keys := make([]reqKey, 0, len(s.stats.reqs))
	for k := range s.stats.reqs {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b reqKey) int {
		return cmp.Or(cmp.Compare(a.route, b.route), cmp.Compare(a.method, b.method), cmp.Compare(a.code, b.code))
	})
	reqs := make([]appliance.Counter, len(keys))
	for i, k := range keys {
		reqs[i] = *s.stats.reqs[k]
	}
	s.stats.mu.Unlock()
	p.family("appliance_http_requests_total", "counter", "HTTP requests answered, by route and status")
	for i, k := range keys {
		p.sample("appliance_http_requests_total", labels{"method", k.method, "route", k.route, "code", k.code}, float64(reqs[i].Count))
	}
	p.family("appliance_http_request_duration_seconds_total", "counter", "time spent answering HTTP requests, by route and status")
	for i, k := range keys {
		p.sample("appliance_http_request_duration_seconds_total", labels{"method", k.method, "route", k.route, "code", k.code}, reqs[i].Seconds)
	}

	p.family("appliance_jobs_ended_total", "counter", "jobs that ended since the appliance started, by type and state")
	for _, j := range m.Jobs {
		p.sample("appliance_jobs_ended_total", labels{"type", j.Type, "state", j.State}, float64(j.Count))
	}
	p.family("appliance_job_duration_seconds_total", "counter", "run time of the jobs that ended, by type and state")
	for _, j := range m.Jobs {
		p.sample("appliance_job_duration_seconds_total", labels{"type", j.Type, "state", j.State}, j.Seconds)
	}
	p.family("appliance_jobs", "gauge", "jobs waiting or running now")
	for _, st := range []string{"pending", "running"} {
		p.sample("appliance_jobs", labels{"state", st}, float64(m.JobsByState[st]))
	}
	p.family("appliance_webhook_attempts_total", "counter", "webhook delivery attempts since the appliance started, by result")
	for _, res := range []string{"success", "failure"} {
		p.sample("appliance_webhook_attempts_total", labels{"result", res}, float64(m.WebhookAttempts[res].Count))
	}
	p.family("appliance_webhook_attempt_duration_seconds_total", "counter", "time webhook delivery attempts took, by result")
	for _, res := range []string{"success", "failure"} {
		p.sample("appliance_webhook_attempt_duration_seconds_total", labels{"result", res}, m.WebhookAttempts[res].Seconds)
	}
	p.family("appliance_sampler_sweeps_total", "counter", "observability sampling sweeps since the appliance started")
	p.sample("appliance_sampler_sweeps_total", nil, float64(m.SamplerSweeps))
	p.family("appliance_sampler_last_duration_seconds", "gauge", "wall time of the last sampling sweep")
	p.sample("appliance_sampler_last_duration_seconds", nil, m.Sampler.Duration.Seconds())
	p.family("appliance_sampler_last_cpu_seconds", "gauge", "the appliance's CPU time during the last sampling sweep")
	p.sample("appliance_sampler_last_cpu_seconds", nil, m.Sampler.CPU.Seconds())
	p.family("appliance_sampler_last_projects", "gauge", "projects the last sweep sampled, and those whose server did not answer")
	p.sample("appliance_sampler_last_projects", labels{"result", "sampled"}, float64(m.Sampler.Projects))
	p.sample("appliance_sampler_last_projects", labels{"result", "failed"}, float64(m.Sampler.Failed))
	// The data directory's free space against the reserve, for an alert before the appliance degrades.
	d := s.svc.Storage().Disk()
	p.family("appliance_disk_free_bytes", "gauge", "free space of the data directory's file system (-1: not read)")
	p.sample("appliance_disk_free_bytes", nil, float64(d.FreeBytes))
	p.family("appliance_disk_reserve_bytes", "gauge", "free space under which the appliance is degraded (--disk-reserve-mb)")
	p.sample("appliance_disk_reserve_bytes", nil, float64(d.ReserveBytes))
	p.family("appliance_disk_degraded", "gauge", "1 while the free space is under the reserve: writes refused, databases read-only")
	p.sample("appliance_disk_degraded", nil, map[bool]float64{true: 1}[d.Low])

	// A cluster node says which node it is, and the cluster as its member sees it.
	if m.Node != nil {
		p.family("appliance_node_info", "gauge", "the cluster node that serves these metrics (1); its project gauges cover the projects it hosts only")
		p.sample("appliance_node_info", labels{"node", m.Node.ID, "name", m.Node.Name, "advertise", m.Node.Advertise, "version", m.Node.Version}, 1)
	}
	if c := m.Cluster; c != nil {
		leader := false
		for _, mem := range c.Members {
			leader = leader || (mem.Leader && m.Node != nil && mem.Name == m.Node.Name)
		}
		p.family("appliance_cluster_members", "gauge", "etcd members of the cluster, as this node's member knows them")
		p.sample("appliance_cluster_members", nil, float64(len(c.Members)))
		p.family("appliance_cluster_quorum", "gauge", "whether a write can commit now (1: a linearizable read through this node's member answered; 0: no quorum)")
		p.sample("appliance_cluster_quorum", nil, map[bool]float64{true: 1}[c.Quorum])
		p.family("appliance_cluster_is_leader", "gauge", "whether this node's etcd member is the raft leader (1) or not (0)")
		p.sample("appliance_cluster_is_leader", nil, map[bool]float64{true: 1}[leader])
	}

	gauges := []struct {
		name, help string
		v          func(*api.ObservabilitySample) float64
	}{
		{"appliance_project_connections", "client connections to the project's server", func(x *api.ObservabilitySample) float64 { return float64(x.Connections) }},
		{"appliance_project_connection_limit", "the project's server's connection limit", func(x *api.ObservabilitySample) float64 { return float64(x.ConnectionLimit) }},
		{"appliance_project_storage_bytes", "the project's database size", func(x *api.ObservabilitySample) float64 { return float64(x.StorageBytes) }},
		{"appliance_project_storage_limit_bytes", "the project's storage limit", func(x *api.ObservabilitySample) float64 { return float64(x.StorageLimitBytes) }},
		{"appliance_project_tps", "transactions per second over the last sample's minute", func(x *api.ObservabilitySample) float64 { return x.TPS }},
		{"appliance_project_cache_hit_ratio", "shared buffer hit ratio over the last sample's minute", func(x *api.ObservabilitySample) float64 { return x.CacheHitRatio }},
		{"appliance_project_active_queries", "statements running when sampled", func(x *api.ObservabilitySample) float64 { return float64(x.ActiveQueries) }},
		{"appliance_project_cpu_cores_used", "CPU cores the project's server used over the last sample's minute", func(x *api.ObservabilitySample) float64 { return x.CPUCoresUsed }},
		{"appliance_project_memory_bytes", "proportional set size of the project's server processes", func(x *api.ObservabilitySample) float64 { return float64(x.MemUsageBytes) }},
	}
	for _, g := range gauges {
		p.family(g.name, "gauge", g.help)
		for _, prj := range m.Projects {
			if prj.Sample != nil {
				p.sample(g.name, labels{"project_id", prj.ProjectID, "project", prj.Name, "organization_id", prj.OrganizationID}, g.v(prj.Sample))
			}
		}
	}
	return bw.Flush()
}

// labels are name, value pairs.
type labels []string

// promWriter writes the Prometheus text exposition format.
type promWriter struct{ w *bufio.Writer }

func (p promWriter) family(name, typ, help string) {
	fmt.Fprintf(p.w, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, typ)
}

func (p promWriter) sample(name string, l labels, v float64) {
	p.w.WriteString(name)
	if len(l) > 0 {
		p.w.WriteByte('{')
		for i := 0; i+1 < len(l); i += 2 {
			if i > 0 {
				p.w.WriteByte(',')
			}
			p.w.WriteString(l[i])
			p.w.WriteString(`="`)
			p.w.WriteString(labelEscaper.Replace(l[i+1]))
			p.w.WriteByte('"')
		}
		p.w.WriteByte('}')
	}
	p.w.WriteByte(' ')
	p.w.WriteString(strconv.FormatFloat(v, 'g', -1, 64))
	p.w.WriteByte('\n')
}

// labelEscaper escapes a label value: backslash, double quote and line feed.
var labelEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)
