package node

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance/backup/metasnap"
	"github.com/theappliance/appliance/appliance/backup/s3store"
	"github.com/theappliance/appliance/appliance/cluster"
	"github.com/theappliance/appliance/appliance/cluster/lease"
)

// RecoveryKeyFile is where the recovery key is kept in the data directory (mode 0600): on a cluster node,
// the cluster's (cluster init makes it, a join hands it over).
const RecoveryKeyFile = cluster.RecoveryKeyFile

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
// the same disk); at the first start with a bucket it makes the recovery key and prints it. On a cluster
// node the snapshots (of the cluster's store) are taken by the leader only, with the cluster's recovery
// key, which the node has from cluster init or its join: a node without one takes none (it does not make
// its own, which would seal the snapshots with a key the operator does not hold).
func (u *Node) metaSnapshotComponent() *component {
	var run *component // the snapshotter, once there is a bucket
	return &component{name: "metadata-snapshots", start: func(ctx context.Context) error {
		sc, err := parseBackupStore(u.cfg)
		if sc == nil || err != nil {
			return err
		}
		path := filepath.Join(u.dataDir, RecoveryKeyFile)
		if u.members != nil {
			if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
				msg := fmt.Sprintf("this node has no recovery key (%s): it takes no metadata snapshot when it leads. Copy the cluster's (appliance backup-store recovery-key on another node prints it) into that file, mode 0600, and restart it", path)
				u.log.Warn(msg)
				u.svc.Probe.Register("metadata-snapshots", func(context.Context) (string, string) { return api.StatusDegraded, msg })
				return nil
			}
		}
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
		members := u.members
		u.svc.Probe.Register("metadata-snapshots", func(context.Context) (string, string) {
			if members != nil && !members.IsLeader() {
				return api.StatusOperational, "taken by the cluster's leader (this node does not lead)"
			}
			ok, msg := s.Health()
			if !ok {
				return api.StatusDegraded, msg
			}
			return api.StatusOperational, msg
		})
		if members == nil {
			run = inBackground("metadata-snapshots", s.Run)
		} else {
			run = inBackground("metadata-snapshots", func(ctx context.Context) { whileLeading(ctx, members, s.Run) })
		}
		return run.Start(ctx)
	}, stop: func(ctx context.Context) error {
		if run == nil {
			return nil
		}
		return run.Stop(ctx)
	}}
}

// leaderPoll is how often a node that does not lead looks whether it leads now.
const leaderPoll = time.Second

// whileLeading runs fn, with a context that ends with the leadership, each time this node leads the
// cluster, until ctx ends.
func whileLeading(ctx context.Context, members lease.Membership, fn func(context.Context)) {
	t := time.NewTicker(leaderPoll)
	defer t.Stop()
	for {
		if lctx, ok := members.Leading(); ok {
			c, cancel := context.WithCancel(ctx)
			stop := context.AfterFunc(lctx, cancel)
			fn(c)
			stop()
			cancel()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
