package node

import (
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"path/filepath"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance/backup/metasnap"
	"github.com/theappliance/appliance/appliance/backup/s3store"
)

// RecoveryKeyFile is where the recovery key is kept in the data directory (mode 0600).
const RecoveryKeyFile = "recovery.key"

// snapshotFiles are the data directory's files each metadata snapshot carries besides meta.db.
var snapshotFiles = []string{"ca/ca.crt", "ca/ca.key", "secret.key"}

// printRecoveryKey shows a recovery key made now (once: later starts do not print it).
func printRecoveryKey(out io.Writer, key []byte, path string) {
	fmt.Fprintf(out, `
Backup store: created the RECOVERY KEY of this appliance. It decrypts the snapshots of the appliance's
metadata (meta.db, the CA, the sealing key) kept in the bucket: without it, a machine that lost its disk
cannot be rebuilt from the bucket. Store it somewhere else than this machine, now (a password manager).
It is shown once; root can print it again with: appliance backup-store recovery-key
  recovery_key: %s
  (kept in %s, mode 0600)

`, hex.EncodeToString(key), path)
}

// metaSnapshotComponent keeps the metadata snapshots in the bucket (nothing with the local store: it is on
// the same disk); at the first start with a bucket it makes the recovery key and prints it.
func (u *Node) metaSnapshotComponent() *component {
	var run *component // the snapshotter, once there is a bucket
	return &component{name: "metadata-snapshots", start: func(ctx context.Context) error {
		sc, err := parseBackupStore(u.cfg)
		if sc == nil || err != nil {
			return err
		}
		path := filepath.Join(u.dataDir, RecoveryKeyFile)
		key, created, err := metasnap.LoadOrCreateRecoveryKey(path)
		if err != nil {
			return err
		}
		if created {
			printRecoveryKey(u.out, key, path)
		}
		if sc.DataKey, err = metasnap.SnapshotKey(key); err != nil {
			return err
		}
		bucket, err := s3store.New(*sc)
		if err != nil {
			return fmt.Errorf("--backup-store: %w", err)
		}
		s := &metasnap.Snapshotter{DB: u.db, Objects: bucket, DataDir: u.dataDir, Files: snapshotFiles, Log: u.log}
		u.svc.Probe.Register("metadata-snapshots", func(context.Context) (string, string) {
			ok, msg := s.Health()
			if !ok {
				return api.StatusDegraded, msg
			}
			return api.StatusOperational, msg
		})
		run = inBackground("metadata-snapshots", s.Run)
		return run.Start(ctx)
	}, stop: func(ctx context.Context) error {
		if run == nil {
			return nil
		}
		return run.Stop(ctx)
	}}
}
