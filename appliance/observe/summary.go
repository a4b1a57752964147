package observe

import (
	"context"
	"slices"
	"time"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance/apperr"
	"github.com/theappliance/appliance/appliance/authz"
	"github.com/theappliance/appliance/store"
)

// Summary is the project's home at a glance, from the records alone (never its server): storage and
// connections as of the newest sample, CPU and memory over the last day, the newest backup (when the caller
// may read backups) and the alerts in force.
func (s *Service) Summary(ctx context.Context, p *authz.Principal, projectID string) (*api.ProjectSummaryResponse, error) {
	now := s.now()
	out := &api.ProjectSummary{Usage: []api.UsagePoint{}, OpenAlerts: []*api.ProjectAlert{}}
	err := s.db.View(func(tx *store.Tx) error {
		prj, err := s.host.VisibleProject(tx, p, projectID)
		if err != nil {
			return err
		}
		plan := s.host.Plan(prj.Plan)
		out.StorageLimitBytes, out.ConnectionLimit = prj.StorageLimitBytes, int64(prj.MaxConnections)
		out.CPUQuotaCores, out.MemLimitBytes = plan.CPUCores, plan.MemoryBytes
		if last := LastSample(tx, prj.ID); last != nil {
			at := last.SampledAt
			out.SampledAt = &at
			out.StorageBytes, out.StorageLimitBytes = last.StorageBytes, last.StorageLimitBytes
			out.Connections, out.ConnectionLimit = last.Connections, last.ConnectionLimit
		}
		var samples []api.ObservabilitySample
		err = store.ObservabilitySamples.Range(tx, prj.ID, now.Add(-api.SummaryUsageHours*time.Hour), now.Add(time.Nanosecond), func(at time.Time, v []byte) error {
			if x, err := decodeSample(at, v); err == nil {
				samples = append(samples, x)
			}
			return nil
		})
		if err != nil {
			return apperr.Internal(err, "read the samples")
		}
		for _, x := range downsample(samples, api.SummaryUsagePoints) {
			out.Usage = append(out.Usage, api.UsagePoint{SampledAt: x.SampledAt, CPUCoresUsed: x.CPUCoresUsed, MemUsageBytes: x.MemUsageBytes})
		}
		if p.Has(api.ScopeBackupsRead) {
			if out.LastBackup, err = s.host.NewestBackup(tx, prj.ID); err != nil {
				return apperr.Internal(err, "read the newest backup")
			}
		}
		open, err := openAlerts(tx, prj.ID)
		if err != nil {
			return apperr.Internal(err, "read alerts")
		}
		for _, a := range open {
			out.OpenAlerts = append(out.OpenAlerts, alertView(a))
		}
		slices.SortFunc(out.OpenAlerts, func(a, b *api.ProjectAlert) int { return b.TriggeredAt.Compare(a.TriggeredAt) })
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &api.ProjectSummaryResponse{Summary: out}, nil
}

// OpenAlertCounts is, in tx, how many alerts are in force per project of ids (those with none left out).
func OpenAlertCounts(tx *store.Tx, ids []string) (map[string]int, error) {
	out := map[string]int{}
	for _, id := range ids {
		open, err := openAlerts(tx, id)
		if err != nil {
			return nil, err
		}
		if len(open) > 0 {
			out[id] = len(open)
		}
	}
	return out, nil
}
