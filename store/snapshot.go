package store

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"
)

// spoolPattern names the directories a snapshot of the metadata on etcd is built in.
const spoolPattern = ".meta-snapshot-build-*"

// SetSpoolDir makes dir (a cluster node's data directory: cluster.StartMember) where snapshots of the
// metadata on etcd are built, and removes what a process killed while it built one left there. Without
// it they are built in the system's temporary directory, where such a leftover — a copy of the metadata
// — would stay.
func (db *DB) SetSpoolDir(dir string) {
	db.spoolDir = dir
	if stale, _ := filepath.Glob(filepath.Join(dir, spoolPattern)); len(stale) > 0 {
		for _, d := range stale {
			os.RemoveAll(d)
		}
	}
}

// writeEtcdSnapshot is WriteSnapshot on etcd: every bucket as of one revision (one read transaction, whose
// reads are all at the revision of its first), written into a new bbolt file — a meta.db as a single
// appliance's, which Open accepts — that is then copied to w. The generation is the revision. The file is
// built in a private directory (0700, the file 0600) under the spool directory (SetSpoolDir), removed
// before the return.
func (db *DB) writeEtcdSnapshot(w io.Writer) (generation uint64, err error) {
	dir, err := os.MkdirTemp(db.spoolDir, spoolPattern)
	if err != nil {
		return 0, fmt.Errorf("write a snapshot of the metadata: %w", err)
	}
	defer os.RemoveAll(dir)
	b, err := bolt.Open(filepath.Join(dir, "meta.db"), 0o600, &bolt.Options{Timeout: 2 * time.Second, NoSync: true})
	if err != nil {
		return 0, fmt.Errorf("write a snapshot of the metadata: %w", err)
	}
	defer b.Close()
	err = db.View(func(tx *Tx) error {
		generation = uint64(tx.kv.generation())
		return b.Update(func(btx *bolt.Tx) error {
			for _, name := range append([][]byte{bucketMeta}, allBuckets()...) {
				src := tx.kv.bucket(name)
				dst, err := btx.CreateBucketIfNotExists(name)
				if err != nil {
					return err
				}
				if err := src.ForEach(func(k, v []byte) error { return dst.Put(bytes.Clone(k), bytes.Clone(v)) }); err != nil {
					return fmt.Errorf("bucket %s: %w", name, err)
				}
				if seq := src.Sequence(); seq > 0 {
					if err := dst.SetSequence(seq); err != nil {
						return err
					}
				}
			}
			return nil
		})
	})
	if err != nil {
		return 0, fmt.Errorf("write a snapshot of the metadata: %w", err)
	}
	err = b.View(func(btx *bolt.Tx) error {
		_, err := btx.WriteTo(w)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("write a snapshot of the metadata: %w", err)
	}
	return generation, nil
}
