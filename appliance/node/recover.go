package node

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/theappliance/appliance/appliance"
	"github.com/theappliance/appliance/appliance/backup/metasnap"
	"github.com/theappliance/appliance/appliance/backup/s3store"
	"github.com/theappliance/appliance/appliance/programs"
	"github.com/theappliance/appliance/scheduler/lane"
	"github.com/theappliance/appliance/store"
)

// RecoverOptions are recover's own flags.
type RecoverOptions struct {
	KeyFile   string // --recovery-key
	Parallel  int    // --parallel
	StartOver bool   // --start-over
}

// errRecoverFailed is recover's error when some project could not be rebuilt (each is reported).
var errRecoverFailed = errors.New("recover: some projects were not rebuilt (see above); run the same command again to try them again (the restored ones are kept)")

// Recover is `appliance recover`: the metadata snapshot checked in full, then put into the data
// directory, then the projects rebuilt by the service (appliance.Service.Recover) with the instances' part
// of up (store and service components), stopped at the end. On a data directory holding the record of a
// recovery under way (appliance.RecoveryProgress), it finishes that recovery instead.
func Recover(ctx context.Context, cfg Config, o RecoverOptions, out io.Writer) error {
	if ctx == nil {
		ctx = context.Background()
	}
	u := &Node{cfg: cfg, out: out}
	if err := u.parseFlags(); err != nil {
		return err
	}
	if o.KeyFile == "" {
		return errors.New("--recovery-key: required (the file of the recovery key up showed at its first start)")
	}
	if o.Parallel < 1 {
		return fmt.Errorf("--parallel %d: want 1 or more", o.Parallel)
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
	key, err := metasnap.ReadRecoveryKey(o.KeyFile)
	if err != nil {
		return fmt.Errorf("--recovery-key: %w", err)
	}
	if sc.DataKey, err = metasnap.SnapshotKey(key); err != nil {
		return err
	}
	bucket, err := s3store.New(*sc)
	if err != nil {
		return fmt.Errorf("--backup-store: %w", err)
	}

	// A recovery under way in the directory is finished (or, with --start-over, discarded); anything else
	// in it is refused.
	prog, err := appliance.LoadRecoveryProgress(dataDir)
	switch {
	case errors.Is(err, appliance.ErrNoRecoveryProgress):
		if err := checkEmptyDataDir(dataDir); err != nil {
			return err
		}
		prog = nil
	case err != nil:
		return fmt.Errorf("%w (nothing was changed)", err)
	default:
		if prog, err = u.resumeRecovery(ctx, bucket, prog, dataDir, o.StartOver); err != nil {
			return err
		}
	}
	if prog == nil {
		// The snapshot, read and checked in full next to the data directory before anything goes into it.
		fmt.Fprintf(out, "reading the newest metadata snapshot of %s\n", cfg.BackupStore)
		m, staged, err := stageSnapshot(ctx, bucket, dataDir)
		if err != nil {
			return err
		}
		defer os.RemoveAll(staged)
		fmt.Fprintf(out, "metadata snapshot %s (taken %s, generation %d): %d objects checked\n", m.ID, m.Created.Format(time.RFC3339), m.Generation, len(m.Objects))
		if prog, err = appliance.NewRecoveryProgress(dataDir, cfg.BackupStore, m.ID, m.Created, m.Generation, time.Now().UTC()); err != nil {
			return err
		}
		if err := installSnapshot(m, staged, dataDir, key); err != nil {
			return err
		}
		os.RemoveAll(staged) // now, not at the end: a killed run leaves nothing beside the directory
		if err := prog.SetMetadataInstalled(); err != nil {
			return err
		}
	}

	// Interrupted, the projects under way stop (a rerun restores them) and the servers started are
	// stopped before the exit.
	ctx, stopSignals := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stopSignals()
	stop, err := u.startForRecovery(ctx, dataDir)
	if err != nil {
		return err
	}
	failed := 0
	err = u.svc.Recover(ctx, appliance.RecoverOptions{Progress: prog, Parallel: o.Parallel, Hook: recoverTestHook(),
		Report: func(rp appliance.RecoveredProject) {
			printRecovered(out, rp)
			if rp.Err != nil {
				failed++
			}
		}})
	stop()
	if errors.Is(err, appliance.ErrRecoverInterrupted) {
		return err
	}
	if err != nil {
		return fmt.Errorf("recover: %w", err)
	}
	if failed > 0 || !prog.Done() {
		return errRecoverFailed
	}
	if err := prog.Remove(); err != nil {
		return err
	}
	fmt.Fprintf(out, "recovered into %s: start it with up and the same flags (without --recovery-key):\n  appliance up --data-dir %s --backup-store %s …\n", dataDir, dataDir, cfg.BackupStore)
	return nil
}

// startForRecovery runs the instances' part of up on the data directory (whose metadata is in place):
// programs, the data directory's CA and box, the store and the service. stop stops them (and the
// instances).
func (u *Node) startForRecovery(ctx context.Context, dataDir string) (stop func(), err error) {
	set, err := programs.Resolve(ctx, programOptions(u.cfg, dataDir, true, u.log))
	if err == nil {
		err = set.Ready()
	}
	if err != nil {
		return nil, fmt.Errorf("programs: %w (fix: %s)", err, programsFix(u.cfg))
	}
	u.set = set
	// The other majors (--pg-dist), as up obtains them: a project upgraded to one is rebuilt on it.
	dists, err := programs.ParseDists(u.cfg.PGDist)
	if err != nil {
		return nil, fmt.Errorf("--pg-dist: %w", err)
	}
	for _, d := range dists {
		if _, err := d.Obtain(ctx, appliance.PostgresDistDir(dataDir), u.log); err != nil {
			fmt.Fprintf(u.out, "--pg-dist %d: %v (a project on PostgreSQL %d cannot be recovered without it)\n", d.Major, err, d.Major)
		}
	}
	for _, step := range []func(context.Context) error{u.openDataDir, u.makeInstancesDir} {
		if err := step(ctx); err != nil {
			return nil, err
		}
	}
	u.lane = lane.NewBackground()
	components := []*component{u.storeComponent(), u.serviceComponent()}
	if err := startAll(ctx, components, u.log); err != nil {
		return nil, err
	}
	return func() { stopAll(context.Background(), components, u.log) }, nil
}

// resumeRecovery decides what to do with the recovery under way in dataDir (prog): finish it (prog
// returned), or, with startOver or when its metadata was never put in place, discard it (nil returned: a
// fresh recovery follows). To be finished, the bucket's newest metadata snapshot must be the one the
// recovery began from: a newer one (the old machine is still running, or up ran on this directory) would
// be lost by finishing, and putting it in place over the first run's would lose what that run did (ports
// moved, projects restored); --start-over chooses the newer one.
func (u *Node) resumeRecovery(ctx context.Context, bucket *s3store.Bucket, prog *appliance.RecoveryProgress, dataDir string, startOver bool) (*appliance.RecoveryProgress, error) {
	out := u.out
	if err := checkMetaUnused(dataDir); err != nil {
		return nil, err
	}
	id, created, _ := prog.Snapshot()
	newest, err := metasnap.LatestSnapshot(ctx, bucket)
	if errors.Is(err, s3store.ErrCorrupt) {
		return nil, fmt.Errorf("%w: is --recovery-key this appliance's recovery key? (nothing was changed)", err)
	}
	if err != nil {
		return nil, fmt.Errorf("%w (nothing was changed)", err)
	}
	if newest.ID != id && !startOver && prog.MetadataInstalled() {
		why := "newer than"
		if newest.ID < id {
			why = "older than"
		}
		return nil, fmt.Errorf("%s holds a recovery begun from the metadata snapshot %s (taken %s, from %s), but the bucket's newest snapshot %s (taken %s) is %s it: "+
			"finishing would not restore it (the old machine may still be running, or up ran on this directory). "+
			"Run recover again with --start-over to discard what the unfinished recovery did and begin from %s (nothing was changed)",
			dataDir, id, created.Format(time.RFC3339), prog.BackupStore(), newest.ID, newest.Created.Format(time.RFC3339), why, newest.ID)
	}
	if !startOver && prog.MetadataInstalled() {
		if err := prog.NewRun(); err != nil {
			return nil, err
		}
		n := prog.Counts()
		fmt.Fprintf(out, "finishing the recovery in %s (run %d) from metadata snapshot %s (taken %s): %d projects restored, %d failed, %d to do\n",
			dataDir, prog.Runs(), id, created.Format(time.RFC3339), n[appliance.RecoveryRestored], n[appliance.RecoveryFailed], n[appliance.RecoveryPending])
		return prog, nil
	}
	if startOver {
		fmt.Fprintf(out, "--start-over: discarding the unfinished recovery in %s (from metadata snapshot %s)\n", dataDir, id)
	} else {
		fmt.Fprintf(out, "the unfinished recovery in %s had not put its metadata in place: beginning again\n", dataDir)
	}
	if prog.MetadataInstalled() {
		// Its servers (a killed run leaves them running) stop before their directories go.
		stop, err := u.startForRecovery(ctx, dataDir)
		if err != nil {
			return nil, fmt.Errorf("--start-over: %w", err)
		}
		err = u.svc.RemoveInstances(ctx)
		stop()
		if err != nil {
			return nil, fmt.Errorf("--start-over: %w", err)
		}
	}
	entries, err := os.ReadDir(dataDir)
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		if e.Name() == appliance.RecoveryProgressFile {
			continue // last: a crash meanwhile leaves a recovery to discard, not a directory to refuse
		}
		if err := os.RemoveAll(filepath.Join(dataDir, e.Name())); err != nil {
			return nil, err
		}
	}
	if err := prog.Remove(); err != nil {
		return nil, err
	}
	return nil, nil
}

// checkMetaUnused refuses a data directory whose meta.db a running appliance holds.
func checkMetaUnused(dataDir string) error {
	if _, err := os.Stat(MetaFile(dataDir)); err != nil {
		return nil
	}
	db, err := store.OpenWith(MetaFile(dataDir), store.Options{ReadOnly: true})
	if err != nil {
		return fmt.Errorf("%w (nothing was changed)", err)
	}
	return db.Close()
}

// checkEmptyDataDir refuses a data directory that holds anything (a meta.db above all) and no recovery
// under way: recover never writes over an appliance.
func checkEmptyDataDir(dataDir string) error {
	if _, err := os.Stat(MetaFile(dataDir)); err == nil {
		return fmt.Errorf("%s holds a meta.db and no unfinished recovery (%s): recover rebuilds an appliance into an empty data directory only", dataDir, appliance.RecoveryProgressFile)
	}
	entries, err := os.ReadDir(dataDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("data directory: %w", err)
	}
	if len(entries) > 0 {
		return fmt.Errorf("%s is not empty (it holds %s) and holds no unfinished recovery (%s): recover rebuilds an appliance into an empty data directory only", dataDir, entries[0].Name(), appliance.RecoveryProgressFile)
	}
	return nil
}

// stageSnapshot finds the newest complete metadata snapshot (sealed with the recovery key's snapshot key)
// and writes its files into a new directory beside dataDir, each checked against the manifest's size and
// SHA-256; meta.db must open and hold an organization, secret.key must be a key. Nothing is written into
// dataDir. The caller removes the staged directory.
func stageSnapshot(ctx context.Context, bucket *s3store.Bucket, dataDir string) (*metasnap.Manifest, string, error) {
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
	return os.WriteFile(filepath.Join(dataDir, RecoveryKeyFile), []byte(hex.EncodeToString(recoveryKey)+"\n"), 0o600)
}

// printRecovered is a project's line of recover's report.
func printRecovered(out io.Writer, rp appliance.RecoveredProject) {
	switch {
	case rp.Err != nil:
		fmt.Fprintf(out, "project %s (%s): FAILED: %v\n", rp.ProjectID, rp.Name, rp.Err)
	case rp.Kept:
		fmt.Fprintf(out, "project %s (%s): kept: restored by an earlier run from base backup %s to LSN %s (%s), verified running on timeline %d\n",
			rp.ProjectID, rp.Name, rp.BackupKey, rp.LSN, lastTransaction(rp.At), rp.Timeline)
	default:
		fmt.Fprintf(out, "project %s (%s): restored from base backup %s to LSN %s (%s), now on timeline %d\n",
			rp.ProjectID, rp.Name, rp.BackupKey, rp.LSN, lastTransaction(rp.At), rp.Timeline)
	}
	if len(rp.Notes) > 0 {
		fmt.Fprintf(out, "  %s\n", strings.Join(rp.Notes, "\n  "))
	}
}

// lastTransaction is a report's words for the last replayed transaction's time.
func lastTransaction(at *time.Time) string {
	if at == nil {
		return "no transaction after the backup"
	}
	return "last transaction " + at.UTC().Format(time.RFC3339Nano)
}
