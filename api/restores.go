package api

// RestoreRequest is the body of POST /v1/projects/{projectID}/restores: exactly one target.
type RestoreRequest struct {
	BackupKey      string `json:"backup_key" doc:"restore what this backup contains (recovery_target = immediate)"`
	RestoreTime    string `json:"restore_time" schema:"format=date-time" doc:"RFC 3339: restore the state at this time, within the point-in-time window"`
	RestorePointID string `json:"restore_point_id" doc:"restore the state at this restore point"`
}

// OpenAPIRules says in the API document that exactly one target is named.
func (*RestoreRequest) OpenAPIRules() map[string]any {
	one := func(f string) map[string]any {
		return map[string]any{"required": []any{f}, "properties": map[string]any{f: map[string]any{"minLength": 1}}}
	}
	return map[string]any{"description": "exactly one of backup_key, restore_time and restore_point_id",
		"oneOf": []any{one("backup_key"), one("restore_time"), one("restore_point_id")}}
}

// JobBackupRestore restores a project from its backup store.
const JobBackupRestore = "backup.restore"
