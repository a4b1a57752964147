package cmd

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/theappliance/appliance/appliance"
)

var (
	_ = registerClientCommand(newBackupsCmd)
	_ = registerClientCommand(newRestoreCmd)
	_ = registerClientCommand(newRestorePointsCmd)
)

func newBackupsCmd(o *clientOpts) *cobra.Command {
	return groupCmd("backups", []string{"backup"}, "List and take a project's base backups",
		newBackupsListCmd(o), newBackupsCreateCmd(o))
}

func newBackupsListCmd(o *clientOpts) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:     "list PROJECT_ID",
		Aliases: []string{"ls"},
		Short:   "List a project's base backups, newest first",
		Args:    cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			path := projectPath(args[0]) + "/backups"
			var list appliance.BackupList
			if done, err := o.show(c, path, asJSON, &list); done || err != nil {
				return err
			}
			tw := tabwriter.NewWriter(c.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tKEY\tLABEL\tSTATE\tVERIFICATION\tSIZE\tCREATED")
			for _, b := range list.Backups {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", b.ID, b.BackupKey, firstNonEmpty(b.Label, "-"), b.State,
					b.VerificationState, humanBytes(b.SizeBytes), b.CreatedAt.UTC().Format(time.RFC3339))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the API's JSON answer")
	return cmd
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
	var (
		req  appliance.CreateBackupRequest
		wait bool
	)
	cmd := &cobra.Command{
		Use:   "create PROJECT_ID",
		Short: "Take a base backup (pg_basebackup, then pg_verifybackup) in a job",
		Example: `  appliance backups create prj_... --label before-migration --wait
  appliance restore prj_... --backup-key <key from appliance backups list>`,
		Args: cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			id := args[0]
			cl, err := o.authed()
			if err != nil {
				return err
			}
			var res appliance.JobResponse
			if err := cl.do(c.Context(), http.MethodPost, projectPath(id)+"/backups", &req, &res); err != nil {
				return err
			}
			if res.Job == nil {
				return fmt.Errorf("POST %s/backups: unexpected response: no job", projectPath(id))
			}
			jobStarted(c, "Backing up project "+id, res.Job, wait)
			if !wait {
				return nil
			}
			j, err := waitJob(c, cl, res.Job)
			if err != nil {
				return err
			}
			var r backupResult
			if len(j.Result) == 0 || json.Unmarshal(j.Result, &r) != nil || r.BackupID == "" {
				return nil
			}
			fmt.Fprintf(c.OutOrStdout(), "Backup %s (key %s): %s, verification %s.\n", r.BackupID, r.BackupKey,
				humanBytes(r.SizeBytes), r.VerificationState)
			if r.VerificationState == "failed" {
				return fmt.Errorf("backup %s was taken but failed verification (pg_verifybackup): see `appliance backups list %s --json`", r.BackupID, id)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&req.Label, "label", "", "label of the backup (at most 100 characters)")
	f.BoolVar(&wait, "wait", false, "wait until the backup is taken and verified (or failed)")
	return cmd
}

func newRestoreCmd(o *clientOpts) *cobra.Command {
	var (
		req  appliance.RestoreRequest
		wait bool
	)
	cmd := &cobra.Command{
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
		RunE: func(c *cobra.Command, args []string) error {
			n := 0
			for _, v := range []string{req.BackupKey, req.RestoreTime, req.RestorePointID} {
				if v != "" {
					n++
				}
			}
			if n != 1 {
				return errors.New("restore needs exactly one target: --backup-key, --time or --restore-point")
			}
			id := args[0]
			cl, err := o.authed()
			if err != nil {
				return err
			}
			var res appliance.JobResponse
			if err := cl.do(c.Context(), http.MethodPost, projectPath(id)+"/restores", &req, &res); err != nil {
				return err
			}
			if res.Job == nil {
				return fmt.Errorf("POST %s/restores: unexpected response: no job", projectPath(id))
			}
			target := "backup " + req.BackupKey
			switch {
			case req.RestoreTime != "":
				target = req.RestoreTime
			case req.RestorePointID != "":
				target = "restore point " + req.RestorePointID
			}
			return projectJobStarted(c, cl, "Restoring project "+id+" to "+target, res.Job, wait, id)
		},
	}
	f := cmd.Flags()
	f.StringVar(&req.BackupKey, "backup-key", "", "restore what this base backup holds")
	f.StringVar(&req.RestoreTime, "time", "", "restore the state at this time (RFC 3339, e.g. 2026-01-02T15:04:05Z)")
	f.StringVar(&req.RestorePointID, "restore-point", "", "restore the state at this restore point ID")
	f.BoolVar(&wait, "wait", false, "wait until the restore has ended")
	return cmd
}

func newRestorePointsCmd(o *clientOpts) *cobra.Command {
	return groupCmd("restore-points", []string{"restore-point"}, "List, create and delete a project's named restore points",
		newRestorePointsListCmd(o), newRestorePointsCreateCmd(o), newRestorePointsDeleteCmd(o))
}

func newRestorePointsListCmd(o *clientOpts) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:     "list PROJECT_ID",
		Aliases: []string{"ls"},
		Short:   "List a project's restore points and its point-in-time window",
		Args:    cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			path := projectPath(args[0]) + "/restore-points"
			var list appliance.RestorePointList
			if done, err := o.show(c, path, asJSON, &list); done || err != nil {
				return err
			}
			out := c.OutOrStdout()
			tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tLABEL\tTIME\tBACKUP\tCREATED BY")
			for _, rp := range list.RestorePoints {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", rp.ID, rp.Label, rp.PITRTime.UTC().Format(time.RFC3339),
					firstNonEmpty(rp.BackupKey, "-"), strings.TrimSpace(rp.CreatedByActorKind+" "+rp.CreatedByActorID))
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			_, err := fmt.Fprintf(out, "Point-in-time window: %d day(s).\n", list.PITRWindowDays)
			return err
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the API's JSON answer")
	return cmd
}

func newRestorePointsCreateCmd(o *clientOpts) *cobra.Command {
	var req appliance.RestorePointRequest
	cmd := &cobra.Command{
		Use:     "create PROJECT_ID --label LABEL",
		Short:   "Create a named restore point now (pg_create_restore_point)",
		Example: `  appliance restore-points create prj_... --label before-migration`,
		Args:    cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			if strings.TrimSpace(req.Label) == "" {
				return errors.New("--label is required")
			}
			cl, err := o.authed()
			if err != nil {
				return err
			}
			var res appliance.RestorePointResponse
			if err := cl.do(c.Context(), http.MethodPost, projectPath(args[0])+"/restore-points", &req, &res); err != nil {
				return err
			}
			rp := res.RestorePoint
			if rp == nil {
				return fmt.Errorf("POST %s/restore-points: unexpected response: no restore point", projectPath(args[0]))
			}
			fmt.Fprintf(c.OutOrStdout(), "Created restore point %s (%s) at %s.\n", rp.ID, rp.Label, rp.PITRTime.UTC().Format(time.RFC3339Nano))
			return nil
		},
	}
	cmd.Flags().StringVar(&req.Label, "label", "", "label of the restore point, 1 to 100 characters (required)")
	return cmd
}

func newRestorePointsDeleteCmd(o *clientOpts) *cobra.Command {
	return &cobra.Command{
		Use:   "delete PROJECT_ID RESTORE_POINT_ID",
		Short: "Delete a restore point (it is no longer listed nor restorable)",
		Args:  cobra.ExactArgs(2),
		RunE: func(c *cobra.Command, args []string) error {
			cl, err := o.authed()
			if err != nil {
				return err
			}
			var res appliance.DeletedResponse
			path := projectPath(args[0]) + "/restore-points/" + seg(args[1])
			if err := cl.do(c.Context(), http.MethodDelete, path, nil, &res); err != nil {
				return err
			}
			fmt.Fprintf(c.OutOrStdout(), "Deleted restore point %s.\n", args[1])
			return nil
		},
	}
}
