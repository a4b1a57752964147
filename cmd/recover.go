package cmd

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/theappliance/appliance/appliance"
	"github.com/theappliance/appliance/appliance/backup/metasnap"
	"github.com/theappliance/appliance/appliance/backup/s3store"
	"github.com/theappliance/appliance/appliance/programs"
	"github.com/theappliance/appliance/scheduler/lane"
	"github.com/theappliance/appliance/store"
)

func init() {
	var cfg UpConfig
	var keyFile string
	rec := &cobra.Command{
		Use:   "recover",
		Short: "Rebuild an appliance from its backup store on a new, empty data directory (then run up)",
		Long: `recover rebuilds, into an empty --data-dir, the appliance whose backup store is --backup-store:
the newest metadata snapshot (meta.db, the CA, secret.key), opened with the recovery key and checked
before anything is written, then every project's database from its newest base backup and the whole
WAL archive. It takes up's flags (the same command line serves both; those of the listeners are not
used) and --recovery-key. Run up on the same data directory afterwards.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			return runRecover(c.Context(), cfg, keyFile, c.OutOrStdout())
		},
	}
	upFlags(rec, &cfg)
	rec.Flags().StringVar(&keyFile, "recovery-key", envDefault("APPLIANCE_RECOVERY_KEY_FILE", ""), "file holding the recovery key (64 hex digits) up showed at its first start with the backup store (APPLIANCE_RECOVERY_KEY_FILE)")
	root.AddCommand(rec)
}

// errRecoverFailed is recover's error when some project could not be rebuilt (each is reported).
var errRecoverFailed = errors.New("recover: some projects were not rebuilt (see above)")

// runRecover is `appliance recover`: the metadata snapshot checked in full, then put into the data
// directory, then the projects rebuilt by the service (appliance.Service.Recover) with the instances' part
// of up (store and service components), stopped at the end.
func runRecover(ctx context.Context, cfg UpConfig, keyFile string, out io.Writer) error {
	if ctx == nil {
		ctx = context.Background()
	}
	u := &upRun{cfg: cfg, out: out}
	level, err := u.parseFlags()
	if err != nil {
		return err
	}
	u.log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	if keyFile == "" {
		return errors.New("--recovery-key: required (the file of the recovery key up showed at its first start)")
	}
	sc, err := parseBackupStore(cfg)
	if err != nil {
		return err
	}
	if sc == nil {
		return errors.New("--backup-store: required (s3://BUCKET/PREFIX of the appliance to recover)")
	}
	dataDir, err := filepath.Abs(cfg.DataDir)
	if err != nil {
		return err
	}
	if err := checkEmptyDataDir(dataDir); err != nil {
		return err
	}
	key, err := metasnap.ReadRecoveryKey(keyFile)
	if err != nil {
		return fmt.Errorf("--recovery-key: %w", err)
	}

	// The snapshot, read and checked in full next to the data directory before anything goes into it.
	fmt.Fprintf(out, "reading the newest metadata snapshot of %s\n", cfg.BackupStore)
	m, staged, err := stageSnapshot(ctx, *sc, key, dataDir)
	if err != nil {
		return err
	}
	defer os.RemoveAll(staged)
	fmt.Fprintf(out, "metadata snapshot %s (taken %s, generation %d): %d objects checked\n", m.ID, m.Created.Format(time.RFC3339), m.Generation, len(m.Objects))
	if err := installSnapshot(m, staged, dataDir, key); err != nil {
		return err
	}

	// The instances' part of up: programs, the data directory's CA and box, the store and the service.
	set, err := programs.Resolve(ctx, programOptions(cfg, dataDir, true, u.log))
	if err == nil {
		err = set.Ready()
	}
	if err != nil {
		return fmt.Errorf("programs: %w (fix: %s)", err, programsFix(cfg))
	}
	u.set = set
	for _, step := range []func(context.Context) error{u.openDataDir, u.makeInstancesDir} {
		if err := step(ctx); err != nil {
			return err
		}
	}
	u.lane = lane.NewBackground()
	// Interrupted, the project under way fails and the servers started are stopped before the exit.
	ctx, stopSignals := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stopSignals()
	components := []*component{u.storeComponent(), u.serviceComponent()}
	if err := startAll(ctx, components, u.log); err != nil {
		return err
	}
	failed := 0
	err = u.svc.Recover(ctx, func(rp appliance.RecoveredProject) {
		printRecovered(out, rp)
		if rp.Err != nil {
			failed++
		}
	})
	stopAll(components, u.log)
	if err != nil {
		return fmt.Errorf("recover: %w", err)
	}
	if failed > 0 {
		return errRecoverFailed
	}
	fmt.Fprintf(out, "recovered into %s: start it with up and the same flags (without --recovery-key):\n  appliance up --data-dir %s --backup-store %s …\n", dataDir, dataDir, cfg.BackupStore)
	return nil
}

// checkEmptyDataDir refuses a data directory that holds anything (a meta.db above all): recover never
// writes over an appliance.
func checkEmptyDataDir(dataDir string) error {
	if _, err := os.Stat(metaFile(dataDir)); err == nil {
		return fmt.Errorf("%s holds a meta.db: recover rebuilds an appliance into an empty data directory only", dataDir)
	}
	entries, err := os.ReadDir(dataDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("data directory: %w", err)
	}
	if len(entries) > 0 {
		return fmt.Errorf("%s is not empty (it holds %s): recover rebuilds an appliance into an empty data directory only", dataDir, entries[0].Name())
	}
	return nil
}

// stageSnapshot finds the newest complete metadata snapshot (sealed with the recovery key's snapshot key)
// and writes its files into a new directory beside dataDir, each checked against the manifest's size and
// SHA-256; meta.db must open and hold an organization, secret.key must be a key. Nothing is written into
// dataDir. The caller removes the staged directory.
func stageSnapshot(ctx context.Context, sc s3store.Config, recoveryKey []byte, dataDir string) (*metasnap.Manifest, string, error) {
	var err error
	if sc.DataKey, err = metasnap.SnapshotKey(recoveryKey); err != nil {
		return nil, "", err
	}
	bucket, err := s3store.New(sc)
	if err != nil {
		return nil, "", fmt.Errorf("--backup-store: %w", err)
	}
	m, err := metasnap.LatestSnapshot(ctx, bucket)
	if errors.Is(err, s3store.ErrCorrupt) {
		return nil, "", fmt.Errorf("%w: is --recovery-key this appliance's recovery key? (nothing was written)", err)
	}
	if err != nil {
		return nil, "", fmt.Errorf("%w (nothing was written)", err)
	}
	if err := os.MkdirAll(filepath.Dir(dataDir), 0o755); err != nil {
		return nil, "", err
	}
	staged, err := os.MkdirTemp(filepath.Dir(dataDir), "."+filepath.Base(dataDir)+".recover-*")
	if err != nil {
		return nil, "", err
	}
	fail := func(err error) (*metasnap.Manifest, string, error) {
		os.RemoveAll(staged)
		return nil, "", fmt.Errorf("%w (nothing was written into %s)", err, dataDir)
	}
	if err := metasnap.Restore(ctx, bucket, m, staged); err != nil {
		return fail(err)
	}
	for _, f := range append([]string{metasnap.DBName}, snapshotFiles...) {
		if _, err := os.Stat(filepath.Join(staged, filepath.FromSlash(f))); err != nil {
			return fail(fmt.Errorf("metadata snapshot %s lacks %s", m.ID, f))
		}
	}
	if key, err := os.ReadFile(filepath.Join(staged, "secret.key")); err != nil || len(key) != 32 {
		return fail(fmt.Errorf("metadata snapshot %s: secret.key is not a key", m.ID))
	}
	db, err := store.Open(filepath.Join(staged, metasnap.DBName))
	if err != nil {
		return fail(fmt.Errorf("metadata snapshot %s: meta.db: %w", m.ID, err))
	}
	var bootstrapped bool
	db.View(func(tx *store.Tx) error { bootstrapped = appliance.Bootstrapped(tx); return nil })
	if err := db.Close(); err != nil {
		return fail(err)
	}
	if !bootstrapped {
		return fail(fmt.Errorf("metadata snapshot %s: meta.db holds no organization", m.ID))
	}
	return m, staged, nil
}

// installSnapshot moves the staged files into the (new) data directory, and writes the recovery key there
// so that up keeps sealing the snapshots with the key the operator holds.
func installSnapshot(m *metasnap.Manifest, staged, dataDir string, recoveryKey []byte) error {
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return fmt.Errorf("create data dir: %w", err)
	}
	for _, o := range m.Objects {
		dst := filepath.Join(dataDir, filepath.FromSlash(o.Name))
		if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
			return err
		}
		if err := os.Rename(filepath.Join(staged, filepath.FromSlash(o.Name)), dst); err != nil {
			return fmt.Errorf("put %s in place: %w", o.Name, err)
		}
	}
	return os.WriteFile(filepath.Join(dataDir, recoveryKeyFile), []byte(hex.EncodeToString(recoveryKey)+"\n"), 0o600)
}

// printRecovered is a project's line of recover's report.
func printRecovered(out io.Writer, rp appliance.RecoveredProject) {
	if rp.Err != nil {
		fmt.Fprintf(out, "project %s (%s): FAILED: %v\n", rp.ProjectID, rp.Name, rp.Err)
	} else {
		at := "no transaction after the backup"
		if rp.At != nil {
			at = "last transaction " + rp.At.UTC().Format(time.RFC3339Nano)
		}
		fmt.Fprintf(out, "project %s (%s): restored from base backup %s to LSN %s (%s), now on timeline %d\n",
			rp.ProjectID, rp.Name, rp.BackupKey, rp.LSN, at, rp.Timeline)
	}
	if len(rp.Notes) > 0 {
		fmt.Fprintf(out, "  %s\n", strings.Join(rp.Notes, "\n  "))
	}
}
