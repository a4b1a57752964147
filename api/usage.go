package api

import "time"

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
	WebhookDeliveryRate7d float64 `json:"webhook_delivery_rate_7d" doc:"webhook deliveries delivered / (delivered + failed) among those that ended in the last 7 days; 1 when none ended"`
	KVStores              int     `json:"kv_stores" doc:"key-value stores that exist (any state)"`
	KVMemoryMB            int     `json:"kv_memory_mb" doc:"the sum of their maxmemory_mb"`
	ComputeSeconds        int64   `json:"compute_seconds" doc:"seconds this UTC month the organization's projects' servers ran (previews included): what scale to zero saves"`
	SuspendedSeconds      int64   `json:"suspended_seconds" doc:"seconds this UTC month its projects were suspended for idleness (scale to zero)"`
}

// ProjectUsage is one project's row.
type ProjectUsage struct {
	ProjectID         string `json:"project_id"`
	Name              string `json:"name"`
	State             string `json:"state"`
	StorageBytes      int64  `json:"storage_bytes"`
	StorageLimitBytes int64  `json:"storage_limit_bytes"`
	Connections       int    `json:"connections"`
	ComputeSeconds    int64  `json:"compute_seconds" doc:"seconds this UTC month its server ran: from its creation or the month's start, less its suspensions"`
	SuspendedSeconds  int64  `json:"suspended_seconds" doc:"seconds this UTC month it was suspended for idleness (scale to zero)"`
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
