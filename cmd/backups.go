package cmd

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/theappliance/appliance/api"
)

var (
	_ = registerClientGroup("backups", []string{"backup"}, "List and take a project's base backups",
		newBackupsListCmd, newBackupsCreateCmd)
	_ = registerClientCommand(newRestoreCmd)
	_ = registerClientGroup("restore-points", []string{"restore-point"}, "List, create and delete a project's named restore points",
		newRestorePointsListCmd, newRestorePointsCreateCmd, newRestorePointsDeleteCmd)
)

func newBackupsListCmd(o *clientOpts) *cobra.Command {
	return newAPICmd(o, apiCmd[api.BackupList]{
		Use: "list PROJECT_ID", Aliases: []string{"ls"}, Short: "List a project's base backups, newest first",
		Args: cobra.ExactArgs(1), JSON: true,
		Path:    func(x *call) string { return projectPath(x.args[0]) + "/backups" },
		Columns: []string{"ID", "KEY", "LABEL", "STATE", "VERIFICATION", "SIZE", "CREATED"},
		Rows: func(l *api.BackupList) [][]string {
			return rowsOf(l.Backups, func(b *api.Backup) []string {
				return []string{b.ID, b.BackupKey, firstNonEmpty(b.Label, "-"), b.State, b.VerificationState,
					humanBytes(b.SizeBytes), stamp(b.CreatedAt)}
			})
		},
	})
}

// backupResult is the result of a completed backup.create job.
type backupResult struct {
	BackupID          string `json:"backup_id"`
	BackupKey         string `json:"backup_key"`
	SizeBytes         int64  `json:"size_bytes"`
	VerificationState string `json:"verification_state"`
	Skipped           string `json:"skipped"`
}

func newBackupsCreateCmd(o *clientOpts) *cobra.Command {
	var req api.CreateBackupRequest
	return jobCmd(o, apiCmd[api.JobResponse]{
		Use:   "create PROJECT_ID",
		Short: "Take a base backup (pg_basebackup, then pg_verifybackup) in a job",
		Example: `  appliance backups create prj_... --label before-migration --wait
  appliance restore prj_... --backup-key <key from appliance backups list>`,
		Flags: func(f *pflag.FlagSet) {
			f.StringVar(&req.Label, "label", "", "label of the backup (at most 100 characters)")
		},
		Method: http.MethodPost,
		Body:   func(*call) any { return &req },
		Wait:   "wait until the backup is taken and verified (or failed)",
		Print: func(x *call, _ *api.JobResponse) error {
			var r backupResult
			if len(x.job.Result) == 0 || json.Unmarshal(x.job.Result, &r) != nil || r.BackupID == "" {
				return nil
			}
			x.printf("Backup %s (key %s): %s, verification %s.\n", r.BackupID, r.BackupKey, humanBytes(r.SizeBytes), r.VerificationState)
			if r.VerificationState == "failed" {
				return fmt.Errorf("backup %s was taken but failed verification (pg_verifybackup): see `appliance backups list %s --json`", r.BackupID, x.args[0])
			}
			return nil
		},
	}, projectPath, "/backups", "Backing up project %s")
}

func newRestoreCmd(o *clientOpts) *cobra.Command {
	var req api.RestoreRequest
	return newAPICmd(o, apiCmd[api.JobResponse]{
		Use:   "restore PROJECT_ID (--backup-key KEY | --time RFC3339 | --restore-point ID)",
		Short: "Restore a project to a backup, a point in time or a restore point",
		Long: `Restore a project's database, in a backup.restore job, to exactly one target:
  --backup-key     what a base backup holds (appliance backups list shows the keys)
  --time           the state at a moment (RFC 3339) within the point-in-time window
  --restore-point  the state at a named restore point (appliance restore-points list)
The restored data directory replaces the current one only once it is up; the old one is kept until then.`,
		Example: `  appliance restore prj_... --backup-key <key> --wait
  appliance restore prj_... --time 2026-01-02T15:04:05Z
  appliance restore prj_... --restore-point rp_...`,
		Args: cobra.ExactArgs(1),
		Flags: func(f *pflag.FlagSet) {
			f.StringVar(&req.BackupKey, "backup-key", "", "restore what this base backup holds")
			f.StringVar(&req.RestoreTime, "time", "", "restore the state at this time (RFC 3339, e.g. 2026-01-02T15:04:05Z)")
			f.StringVar(&req.RestorePointID, "restore-point", "", "restore the state at this restore point ID")
		},
		Validate: func(*call) error {
			n := 0
			for _, v := range []string{req.BackupKey, req.RestoreTime, req.RestorePointID} {
				if v != "" {
					n++
				}
			}
			if n != 1 {
				return errors.New("restore needs exactly one target: --backup-key, --time or --restore-point")
			}
			return nil
		},
		Method: http.MethodPost,
		Path:   func(x *call) string { return projectPath(x.args[0]) + "/restores" },
		Body:   func(*call) any { return &req },
		Job:    jobOf,
		Started: func(x *call, _ *api.JobResponse) string {
			target := "backup " + req.BackupKey
			switch {
			case req.RestoreTime != "":
				target = req.RestoreTime
			case req.RestorePointID != "":
				target = "restore point " + req.RestorePointID
			}
			return "Restoring project " + x.args[0] + " to " + target
		},
		Wait:  "wait until the restore has ended",
		Print: printProjectStateAfter[api.JobResponse],
	})
}

func newRestorePointsListCmd(o *clientOpts) *cobra.Command {
	return newAPICmd(o, apiCmd[api.RestorePointList]{
		Use: "list PROJECT_ID", Aliases: []string{"ls"}, Short: "List a project's restore points and its point-in-time window",
		Args: cobra.ExactArgs(1), JSON: true,
		Path:    func(x *call) string { return projectPath(x.args[0]) + "/restore-points" },
		Columns: []string{"ID", "LABEL", "TIME", "BACKUP", "CREATED BY"},
		Rows: func(l *api.RestorePointList) [][]string {
			return rowsOf(l.RestorePoints, func(rp *api.RestorePoint) []string {
				return []string{rp.ID, rp.Label, stamp(rp.PITRTime), firstNonEmpty(rp.BackupKey, "-"),
					strings.TrimSpace(rp.CreatedByActorKind + " " + rp.CreatedByActorID)}
			})
		},
		Print: func(x *call, l *api.RestorePointList) error {
			_, err := fmt.Fprintf(x.out(), "Point-in-time window: %d day(s).\n", l.PITRWindowDays)
			return err
		},
	})
}

func newRestorePointsCreateCmd(o *clientOpts) *cobra.Command {
	var req api.RestorePointRequest
	return newAPICmd(o, apiCmd[api.RestorePointResponse]{
		Use:     "create PROJECT_ID --label LABEL",
		Short:   "Create a named restore point now (pg_create_restore_point)",
		Example: `  appliance restore-points create prj_... --label before-migration`,
		Args:    cobra.ExactArgs(1),
		Flags: func(f *pflag.FlagSet) {
			f.StringVar(&req.Label, "label", "", "label of the restore point, 1 to 100 characters (required)")
		},
		Validate: func(*call) error {
			if strings.TrimSpace(req.Label) == "" {
				return errors.New("--label is required")
			}
			return nil
		},
		Method: http.MethodPost,
		Path:   func(x *call) string { return projectPath(x.args[0]) + "/restore-points" },
		Body:   func(*call) any { return &req },
		Need:   func(r *api.RestorePointResponse) string { return missing(r.RestorePoint == nil, "restore point") },
		Print: func(x *call, r *api.RestorePointResponse) error {
			rp := r.RestorePoint
			return x.printf("Created restore point %s (%s) at %s.\n", rp.ID, rp.Label, rp.PITRTime.UTC().Format(time.RFC3339Nano))
		},
	})
}

func newRestorePointsDeleteCmd(o *clientOpts) *cobra.Command {
	return newAPICmd(o, apiCmd[api.DeletedResponse]{
		Use:    "delete PROJECT_ID RESTORE_POINT_ID",
		Short:  "Delete a restore point (it is no longer listed nor restorable)",
		Args:   cobra.ExactArgs(2),
		Method: http.MethodDelete,
		Path:   func(x *call) string { return projectPath(x.args[0]) + "/restore-points/" + seg(x.args[1]) },
		Print:  func(x *call, _ *api.DeletedResponse) error { return x.printf("Deleted restore point %s.\n", x.args[1]) },
	})
}
