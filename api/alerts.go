package api

import (
	"fmt"
	"time"
)

// ProjectAlert is the API's view of an alert (the spec's Project alert, with its message).
type ProjectAlert struct {
	ID             string     `json:"id"`
	ProjectID      string     `json:"project_id"`
	Kind           string     `json:"kind" enum:"AlertKind" doc:"backup_unrestorable: the periodic restore test of a backup failed; data_missing (raised at start): the project's instance or key-value store directory is missing from the data directory; backup_store_unreachable: WAL archiving fails"`
	Severity       string     `json:"severity" enum:"AlertSeverity"`
	Message        string     `json:"message"`
	LimitValue     float64    `json:"limit_value" doc:"storage: bytes; connections: sessions; long_transaction: seconds; backup_failed, backup_unrestorable, instance_crashed: 0"`
	ObservedValue  float64    `json:"observed_value"`
	TriggeredAt    time.Time  `json:"triggered_at"`
	AcknowledgedAt *time.Time `json:"acknowledged_at"`
	ResolvedAt     *time.Time `json:"resolved_at"`
	LastNotifiedAt *time.Time `json:"last_notified_at" doc:"when the alert.triggered event was appended (webhooks carry it)"`
}

// AlertList is GET .../alerts.
type AlertList struct {
	Alerts []*ProjectAlert `json:"alerts"`
}

// AlertResponse is POST .../alerts/{alertID}/acknowledge.
type AlertResponse struct {
	Alert *ProjectAlert `json:"alert"`
}

// FormatBytes writes a size in binary units as the API's messages and the CLI show it: 0 B, 512 B,
// 1.5 KiB, 10.0 GiB.
func FormatBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 5; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
