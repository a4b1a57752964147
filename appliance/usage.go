package appliance

import (
	"context"
	"slices"
	"time"

	"github.com/theappliance/appliance/appliance/ids"
	"github.com/theappliance/appliance/appliance/observe"
	"github.com/theappliance/appliance/store"
)

// OrganizationUsage computes the totals from what exists.
func (s *Service) OrganizationUsage(ctx context.Context, p *Principal, orgID string) (*UsageResponse, error) {
	if err := p.CheckOrganization(orgID); err != nil {
		return nil, err
	}
	u := Usage{Projects: []ProjectUsage{}, StorageHistory: []StorageSample{}}
	var projects []*store.Project
	var completed, failed int
	err := s.db.View(func(tx *store.Tx) error {
		if _, err := store.Organizations.Get(tx, orgID); err != nil {
			return notFoundAs(err, "organization %s not found", orgID)
		}
		q, err := s.organizationQuota(tx, orgID)
		if err != nil {
			return Internal(err, "read the organization's quota")
		}
		u.Totals.ProjectsLimit, u.Totals.PreviewsLimit, u.Totals.StorageLimitBytes = q.ProjectsLimit, q.PreviewsLimit, q.StorageLimitBytes
		projects, err = store.Projects.Lookup(tx, store.ProjectsByOrg, orgID, store.Query{})
		if err != nil {
			return Internal(err, "list projects")
		}
		since := s.now().Add(-7 * 24 * time.Hour)
		for _, state := range []string{"completed", "failed"} {
			jobs, err := store.Jobs.Lookup(tx, store.JobsByState, state, store.Query{})
			if err != nil {
				return Internal(err, "list jobs")
			}
			for _, j := range jobs {
				if j.OrganizationID == orgID && j.CompletedAt != nil && j.CompletedAt.After(since) {
					if state == "completed" {
						completed++
					} else {
						failed++
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	for _, prj := range projects {
		if prj.DeletedAt != nil {
			continue
		}
		if prj.PreviewOf != "" { // previews count apart; their storage is the organization's too
			u.Totals.Previews++
			row := s.projectUsage(ctx, prj)
			u.Totals.StorageBytes += row.StorageBytes
			u.Totals.ComputeSeconds += row.ComputeSeconds
			u.Totals.SuspendedSeconds += row.SuspendedSeconds
			continue
		}
		row := s.projectUsage(ctx, prj)
		u.Totals.ComputeSeconds += row.ComputeSeconds
		u.Totals.SuspendedSeconds += row.SuspendedSeconds
		if n, err := s.backupBytes(ctx, prj.ID); err == nil {
			u.Totals.BackupsStorageBytes += n
		} else {
			s.log.Warn("measure backup storage", "project", prj.ID, "err", err)
		}
		u.Projects = append(u.Projects, row)
		u.Totals.Projects++
		u.Totals.StorageBytes += row.StorageBytes
		u.Totals.Connections += row.Connections
	}
	if over := u.Totals.StorageBytes - u.Totals.StorageLimitBytes; over > 0 {
		u.Totals.StorageOverageBytes = over
	}
	u.Totals.JobSuccessRate7d = 1
	if completed+failed > 0 {
		u.Totals.JobSuccessRate7d = float64(completed) / float64(completed+failed)
	}
	if err := s.db.View(func(tx *store.Tx) error {
		rate, err := s.hooks.DeliveryRate(tx, orgID, s.now().Add(-7*24*time.Hour))
		if err != nil {
			return Internal(err, "measure webhook deliveries")
		}
		u.Totals.WebhookDeliveryRate7d = rate
		stores, err := store.KVStores.Lookup(tx, store.KVStoresByOrg, orgID, store.Query{})
		if err != nil {
			return Internal(err, "list key-value stores")
		}
		for _, kv := range stores {
			u.Totals.KVStores++
			u.Totals.KVMemoryMB += kv.MaxMemoryMB
		}
		samples, err := store.StorageSamples.Lookup(tx, store.StorageSamplesByOrg, orgID, store.Query{})
		if err != nil {
			return Internal(err, "list storage samples")
		}
		since := s.now().Add(-StorageHistoryDays * 24 * time.Hour)
		for _, smp := range samples {
			if smp.SampledAt.After(since) {
				u.StorageHistory = append(u.StorageHistory, StorageSample{SampledAt: smp.SampledAt, StorageBytes: smp.StorageBytes})
			}
		}
		return nil
	}); err != nil {
		return nil, err
	}
	slices.SortFunc(u.StorageHistory, func(a, b StorageSample) int { return a.SampledAt.Compare(b.SampledAt) })
	return &UsageResponse{Usage: u}, nil
}

// projectUsage is a project's usage row, measured on its server when it is active.
func (s *Service) projectUsage(ctx context.Context, prj *store.Project) ProjectUsage {
	row := ProjectUsage{ProjectID: prj.ID, Name: prj.Name, State: prj.State, StorageLimitBytes: prj.StorageLimitBytes}
	row.ComputeSeconds, row.SuspendedSeconds = s.computeSeconds(prj)
	if prj.State == ProjectActive && prj.IdleSuspendedAt != nil {
		// Suspended for idleness (scale to zero): no connection, and the size of the last sample (a
		// connection to measure it would wake the project).
		_ = s.db.View(func(tx *store.Tx) error {
			if smp := observe.LastSample(tx, prj.ID); smp != nil {
				row.StorageBytes = smp.StorageBytes
			}
			return nil
		})
		return row
	}
	if prj.State == ProjectActive {
		if size, conns, err := s.measureProject(ctx, prj); err == nil {
			row.StorageBytes, row.Connections = size, conns
		} else {
			s.log.Warn("measure project", "project", prj.ID, "err", err)
		}
	}
	return row
}

// StorageHistoryDays is how long storage samples are kept (and how far usage.storage_history reaches).
const StorageHistoryDays = 30

// SampleStorage records every organization's storage now (the sum of its active projects' database
// sizes, as usage measures them) and deletes the samples older than StorageHistoryDays. It returns the
// number of samples recorded. The scheduler runs it hourly.
func (s *Service) SampleStorage(ctx context.Context) (int, error) {
	var orgs []*store.Organization
	var projects []*store.Project
	if err := s.db.View(func(tx *store.Tx) (err error) {
		if orgs, err = store.Organizations.All(tx, nil); err != nil {
			return err
		}
		projects, err = store.Projects.All(tx, func(p *store.Project) bool { return p.State == ProjectActive })
		return err
	}); err != nil {
		return 0, err
	}
	// A suspended organization's servers are stopped: it gets no sample until it resumes (a measure would
	// read 0).
	orgs = slices.DeleteFunc(orgs, func(o *store.Organization) bool { return o.SuspendedAt != nil })
	live := map[string]bool{}
	for _, o := range orgs {
		live[o.ID] = true
	}
	sizes := map[string]int64{}
	for _, prj := range projects {
		if live[prj.OrganizationID] {
			sizes[prj.OrganizationID] += s.projectUsage(ctx, prj).StorageBytes
		}
	}
	now := s.now()
	cutoff := now.Add(-StorageHistoryDays * 24 * time.Hour)
	err := s.db.Update(func(tx *store.Tx) error {
		for _, o := range orgs {
			old, err := store.StorageSamples.Lookup(tx, store.StorageSamplesByOrg, o.ID, store.Query{})
			if err != nil {
				return err
			}
			for _, smp := range old {
				if !smp.SampledAt.After(cutoff) {
					if err := store.StorageSamples.Delete(tx, smp.ID); err != nil {
						return err
					}
				}
			}
			if err := store.StorageSamples.Put(tx, &store.StorageSample{ID: ids.New("smp"), OrganizationID: o.ID,
				SampledAt: now, StorageBytes: sizes[o.ID]}); err != nil {
				return err
			}
		}
		return nil
	})
	return len(orgs), err
}

// backupBytes is what the backup stores hold of a project: the store's objects (the bucket's, when one is
// the backup store: its exports and uploaded dumps among them) and, with a bucket, what only the local
// directory holds: the uploaded dumps and the exports made before the bucket. The local files of the
// bucket's exports and uploaded dumps are a cache of its objects, counted once, as objects.
func (s *Service) backupBytes(ctx context.Context, projectID string) (int64, error) {
	n, err := s.retentionStore().ProjectSize(ctx, projectID)
	if err != nil || s.backupObjects == nil {
		return n, err
	}
	uploads, err := s.migrate.LocalOnlyBytes(projectID)
	if err != nil {
		return n, err
	}
	exports, err := s.exports.LocalOnlyBytes(projectID)
	return n + uploads + exports, err
}

// computeSeconds are the seconds this UTC month the project's server ran and was suspended for idleness
// (scale to zero): from its creation or the month's start to now (or to its deletion), less its
// suspensions (store.Suspension) and, while its organization is suspended by an operator, that time. A
// project that is not active runs nothing. Earlier suspensions of the organization are not recorded and
// count as running.
func (s *Service) computeSeconds(prj *store.Project) (compute, suspended int64) {
	now := s.now()
	from := time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, time.UTC)
	if prj.CreatedAt.After(from) {
		from = prj.CreatedAt
	}
	to := now
	if prj.State != ProjectActive || prj.PrimaryInstanceID == "" || !to.After(from) {
		return 0, 0
	}
	var sus time.Duration
	_ = s.db.View(func(tx *store.Tx) error {
		if org, err := store.Organizations.Get(tx, prj.OrganizationID); err == nil && org.SuspendedAt != nil && org.SuspendedAt.Before(to) {
			to = *org.SuspendedAt // stopped by the operator since
			if to.Before(from) {
				to = from
			}
		}
		ivs, err := store.SuspendedIntervals(tx, prj.ID, from, to)
		for _, iv := range ivs {
			sus += iv[1].Sub(iv[0])
		}
		return err
	})
	run := to.Sub(from) - sus
	return int64(max(run, 0) / time.Second), int64(sus / time.Second)
}
