package appliance

import (
	"context"
	"time"

	"github.com/theappliance/appliance/store"
)

// UsageTotals are an organization's totals.
type UsageTotals struct {
	StorageBytes          int64   `json:"storage_bytes"`
	StorageLimitBytes     int64   `json:"storage_limit_bytes"`
	StorageOverageBytes   int64   `json:"storage_overage_bytes"`
	Connections           int     `json:"connections"`
	Projects              int     `json:"projects"`
	ProjectsLimit         int     `json:"projects_limit"`
	Previews              int     `json:"previews"`
	PreviewsLimit         int     `json:"previews_limit"`
	BackupsStorageBytes   int64   `json:"backups_storage_bytes" doc:"bytes in the backup store: WAL archive, base backups, exports and uploaded dumps"`
	JobSuccessRate7d      float64 `json:"job_success_rate_7d" doc:"completed / (completed + failed) over the last 7 days; 1 when no job ended"`
	WebhookDeliveryRate7d float64 `json:"webhook_delivery_rate_7d" doc:"delivered / attempted over the last 7 days; 1 when nothing was attempted"`
}

// ProjectUsage is one project's row.
type ProjectUsage struct {
	ProjectID         string `json:"project_id"`
	Name              string `json:"name"`
	State             string `json:"state"`
	StorageBytes      int64  `json:"storage_bytes"`
	StorageLimitBytes int64  `json:"storage_limit_bytes"`
	Connections       int    `json:"connections"`
}

// StorageSample is one point of the storage history.
type StorageSample struct {
	SampledAt    time.Time `json:"sampled_at"`
	StorageBytes int64     `json:"storage_bytes"`
}

// Usage is the usage object.
type Usage struct {
	Totals         UsageTotals     `json:"totals"`
	Projects       []ProjectUsage  `json:"projects"`
	StorageHistory []StorageSample `json:"storage_history"`
}

// UsageResponse wraps the usage object.
type UsageResponse struct {
	Usage Usage `json:"usage"`
}

// OrganizationUsage computes the totals from what exists.
func (s *Service) OrganizationUsage(ctx context.Context, p *Principal, orgID string) (*UsageResponse, error) {
	if err := p.CheckOrganization(orgID); err != nil {
		return nil, err
	}
	q := DefaultOrganizationQuota
	u := Usage{Projects: []ProjectUsage{}, StorageHistory: []StorageSample{},
		Totals: UsageTotals{ProjectsLimit: q.ProjectsLimit, PreviewsLimit: q.PreviewsLimit, StorageLimitBytes: q.StorageLimitBytes}}
	var projects []*store.Project
	var completed, failed int
	err := s.db.View(func(tx *store.Tx) error {
		if _, err := store.Organizations.Get(tx, orgID); err != nil {
			return notFoundAs(err, "organization %s not found", orgID)
		}
		var err error
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
		row := ProjectUsage{ProjectID: prj.ID, Name: prj.Name, State: prj.State, StorageLimitBytes: prj.StorageLimitBytes}
		if prj.State == ProjectActive {
			if size, conns, err := s.measureProject(ctx, prj); err == nil {
				row.StorageBytes, row.Connections = size, conns
			} else {
				s.log.Warn("measure project", "project", prj.ID, "err", err)
			}
		}
		if n, err := s.retentionStore().ProjectSize(prj.ID); err == nil {
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
	u.Totals.WebhookDeliveryRate7d = 1 // no outbound webhooks exist yet: nothing was attempted
	return &UsageResponse{Usage: u}, nil
}
