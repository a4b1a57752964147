package cmd

import (
	"context"
	"io"
	"runtime"

	"github.com/spf13/cobra"

	"github.com/theappliance/appliance/appliance"
	"github.com/theappliance/appliance/appliance/node"
)

func init() {
	var cfg UpConfig
	var o node.RecoverOptions
	rec := &cobra.Command{
		Use:   "recover",
		Short: "Rebuild an appliance from its backup store on a new, empty data directory (then run up)",
		Long: `recover rebuilds, into an empty --data-dir, the appliance whose backup store is --backup-store:
the newest metadata snapshot (meta.db, the CA, secret.key), opened with the recovery key and checked
before anything is written, then every project's database from its newest base backup and the whole
WAL archive, --parallel at a time. It takes up's flags (the same command line serves both; those of the
listeners are not used) and --recovery-key. Run up on the same data directory afterwards.

Interrupted (Ctrl-C, the machine lost) or with projects failed, the same command run again on the same
data directory finishes the job: the projects already restored are verified and kept, the others are
wiped and restored again (the record is <data-dir>/` + appliance.RecoveryProgressFile + `).`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if err := loadUpConfig(c, &cfg); err != nil {
				return err
			}
			return runRecover(c.Context(), cfg, o, c.OutOrStdout())
		},
	}
	upFlags(rec, &cfg)
	f := rec.Flags()
	f.StringVar(&o.KeyFile, "recovery-key", envDefault("APPLIANCE_RECOVERY_KEY_FILE", ""), "file holding the recovery key (64 hex digits) up showed at its first start with the backup store (APPLIANCE_RECOVERY_KEY_FILE)")
	f.IntVar(&o.Parallel, "parallel", envInt("APPLIANCE_RECOVER_PARALLEL", min(4, runtime.NumCPU())), "projects restored at once (APPLIANCE_RECOVER_PARALLEL; default: the CPUs, at most 4)")
	f.BoolVar(&o.StartOver, "start-over", false, "discard what an unfinished recover put into --data-dir (its servers stopped) and begin again from the bucket's newest metadata snapshot")
	root.AddCommand(rec)
}

// runRecover is `appliance recover` (node.Recover) once up's flags are checked.
func runRecover(ctx context.Context, cfg UpConfig, o node.RecoverOptions, out io.Writer) error {
	if err := checkUpFlags(&cfg); err != nil {
		return err
	}
	cfg.Version = Version
	return node.Recover(ctx, cfg, o, out)
}
