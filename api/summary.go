package api

import "time"

// SummaryUsagePoints is at most how many points ProjectSummary.Usage has (over SummaryUsageHours).
const (
	SummaryUsageHours  = 24
	SummaryUsagePoints = 96
)

// ProjectSummary is GET /v1/projects/{projectID}/summary: the project's home at a glance, read from the
// appliance's records only (the sampler's newest minutely sample, the alerts, the newest backup), so it
// answers whatever the state of the project's server (docs/api-decisions.md "Project home and restart").
type ProjectSummary struct {
	SampledAt         *time.Time      `json:"sampled_at" api:"nullable" doc:"the newest minutely sample's time, which storage and connections are as of; null until the sampler read the server (then those figures are 0 and the limits the project's)"`
	StorageBytes      int64           `json:"storage_bytes" doc:"the database's size"`
	StorageLimitBytes int64           `json:"storage_limit_bytes"`
	Connections       int64           `json:"connections" doc:"client sessions when sampled"`
	ConnectionLimit   int64           `json:"connection_limit"`
	CPUQuotaCores     float64         `json:"cpu_quota_cores" doc:"the plan's CPU size"`
	MemLimitBytes     int64           `json:"mem_limit_bytes" doc:"the plan's memory size"`
	Usage             []UsagePoint    `json:"usage" doc:"CPU and memory of the server's processes over the last 24 hours, oldest first (at most 96 points, each the mean of the minutely samples it covers)"`
	LastBackup        *Backup         `json:"last_backup" api:"nullable" doc:"the newest backup, whatever its state; null when there is none, or when the caller lacks backups:read"`
	OpenAlerts        []*ProjectAlert `json:"open_alerts" doc:"the alerts in force (not resolved), newest first"`
}

// UsagePoint is one point of a project's CPU and memory use.
type UsagePoint struct {
	SampledAt     time.Time `json:"sampled_at"`
	CPUCoresUsed  float64   `json:"cpu_cores_used" doc:"CPU time of the server's processes per second (cores)"`
	MemUsageBytes int64     `json:"mem_usage_bytes" doc:"proportional set size (PSS) of the server's processes"`
}

// ProjectSummaryResponse wraps the summary.
type ProjectSummaryResponse struct {
	Summary *ProjectSummary `json:"summary"`
}
