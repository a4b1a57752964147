package kv

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
	"time"

	"github.com/theappliance/appliance/appliance/backup"
	"github.com/theappliance/appliance/appliance/redis"
	"github.com/theappliance/appliance/store"
)

// SnapshotsKept is how many RDB snapshots of a store the backup store keeps.
const SnapshotsKept = 3

// shipState is what ShipSnapshots knows of a store's dump.rdb: the file it saw last (inode, time, size)
// and its SHA-256, when the newest snapshot was shipped, and the last attempt's error.
type shipState struct {
	ino       uint64
	mtime     time.Time
	size      int64
	sha       string
	shippedAt time.Time
	err       error
}

func (st *shipState) sameFile(fi fs.FileInfo) bool {
	return st.ino != 0 && st.ino == inode(fi) && st.mtime.Equal(fi.ModTime()) && st.size == fi.Size()
}

func inode(fi fs.FileInfo) uint64 {
	if sys, ok := fi.Sys().(*syscall.Stat_t); ok {
		return sys.Ino
	}
	return 0
}

// snapshotLock is the keyLocks key that orders a store's shipping and the removal of its snapshots.
func snapshotLock(id string) string { return "snapshot:" + id }

// ShipSnapshots is the periodic task kv-snapshots: every running store's dump.rdb that redis-server saved
// since the last look goes to the backup store as the store's newest snapshot (PutKVSnapshot: the file,
// then its manifest; the older ones beyond SnapshotsKept deleted). An idle store uploads nothing: its
// dump.rdb is the same file (inode, time, size), or one with the same content as the newest snapshot
// (checked by SHA-256 the first time a process sees it, and after a save). Redis replaces dump.rdb by a
// rename, so the open file is a complete snapshot for the whole upload. It returns how many snapshots it
// shipped; each store's failure is logged, joined into the error, and retried at the next run. Without
// Deps.Snapshots it does nothing.
func (s *Service) ShipSnapshots(ctx context.Context) (int, error) {
	if s.snapshots == nil || s.plane == nil {
		return 0, nil
	}
	live, err := s.running()
	if err != nil {
		return 0, err
	}
	n := 0
	var errs []error
	for _, kv := range live {
		shipped, err := s.shipOne(ctx, kv)
		if shipped {
			n++
		}
		if err != nil {
			s.log.Warn("ship a key-value store's snapshot to the backup store", "kv_store", kv.ID, "err", err)
			errs = append(errs, fmt.Errorf("key-value store %s: %w", kv.ID, err))
		}
	}
	return n, errors.Join(errs...)
}

// shipOne ships the store's dump.rdb when it changed; shipped says a new snapshot is complete in the
// backup store.
func (s *Service) shipOne(ctx context.Context, kv *store.KVStore) (shipped bool, err error) {
	unlock := s.locks.lock(snapshotLock(kv.ID))
	defer unlock()
	s.shipMu.Lock()
	st := s.shipped[kv.ID]
	s.shipMu.Unlock()
	defer s.noteShip(kv.ID, func(st *shipState) { st.err = err }) // the last attempt's outcome, for Health
	f, err := os.Open(redis.Config{Dir: kv.Dir}.RDBPath())
	if errors.Is(err, os.ErrNotExist) { // no save yet, or the store is being removed
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return false, err
	}
	if st != nil && st.sameFile(fi) {
		return false, nil
	}
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return false, fmt.Errorf("read %s: %w", f.Name(), err)
	}
	sum := hex.EncodeToString(h.Sum(nil))
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return false, err
	}
	var known, shippedAt = "", time.Time{}
	if st != nil && st.sha != "" {
		known, shippedAt = st.sha, st.shippedAt
	} else { // the first look of this process (or only failures so far): the newest manifest says
		switch m, err := s.snapshots.LatestKVSnapshot(ctx, kv.ProjectID, kv.ID); {
		case err == nil:
			known, shippedAt = m.SHA256, m.ShippedAt
		case !errors.Is(err, backup.ErrNotExist):
			return false, err
		}
	}
	if known == sum { // the content of the newest snapshot already (a restart, a seeded file)
		s.noteShip(kv.ID, func(st *shipState) {
			st.ino, st.mtime, st.size, st.sha, st.shippedAt, st.err = inode(fi), fi.ModTime(), fi.Size(), sum, shippedAt, nil
		})
		return false, nil
	}
	m, err := s.snapshots.PutKVSnapshot(ctx, kv.ProjectID, kv.ID, f, fi.ModTime(), s.now(), SnapshotsKept)
	if m == nil {
		return false, err
	}
	if m.SHA256 != sum { // redis never writes dump.rdb in place: a changed file is not its save
		return true, fmt.Errorf("%s changed while it was shipped (snapshot %s); shipping it again next time", f.Name(), m.ID)
	}
	s.noteShip(kv.ID, func(st *shipState) {
		st.ino, st.mtime, st.size, st.sha, st.shippedAt, st.err = inode(fi), fi.ModTime(), fi.Size(), sum, m.ShippedAt, err
	})
	return true, err
}

// noteShip changes the store's shipState (made when missing).
func (s *Service) noteShip(id string, fn func(*shipState)) {
	s.shipMu.Lock()
	defer s.shipMu.Unlock()
	st := s.shipped[id]
	if st == nil {
		st = &shipState{}
		s.shipped[id] = st
	}
	fn(st)
}

// seed is the redis.Server Seed of a store: its newest snapshot in the backup store, checked against its
// manifest (nil without Deps.Snapshots). A backup store that cannot be read fails the start rather than
// starting the store empty.
func (s *Service) seed(r *store.KVStore) func(context.Context, io.Writer) (bool, error) {
	if s.snapshots == nil {
		return nil
	}
	projectID, id := r.ProjectID, r.ID
	return func(ctx context.Context, w io.Writer) (bool, error) {
		m, err := s.snapshots.LatestKVSnapshot(ctx, projectID, id)
		if errors.Is(err, backup.ErrNotExist) {
			return false, nil
		}
		if err == nil {
			err = s.snapshots.ReadKVSnapshot(ctx, m, w)
		}
		if err != nil {
			return false, fmt.Errorf("fetch the store's newest snapshot from the backup store: %w", err)
		}
		s.log.Info("key-value store's data fetched from the backup store", "kv_store", id, "snapshot", m.ID,
			"bytes", m.Size, "shipped_at", m.ShippedAt)
		return true, nil
	}
}

// removeSnapshots deletes a removed store's snapshots from the backup store (after its directory is
// gone: nothing can be shipped again) and forgets what ShipSnapshots knew of it.
func (s *Service) removeSnapshots(ctx context.Context, kv *store.KVStore) error {
	if s.snapshots == nil {
		return nil
	}
	unlock := s.locks.lock(snapshotLock(kv.ID))
	defer unlock()
	if err := s.snapshots.RemoveKVSnapshots(ctx, kv.ProjectID, kv.ID); err != nil {
		return err
	}
	s.shipMu.Lock()
	delete(s.shipped, kv.ID)
	s.shipMu.Unlock()
	return nil
}

// shipHealth is the status row's word on shipping: how many of the running stores have their newest
// snapshot in the backup store as this process knows it, the oldest of their last shipments, and the
// stores whose last attempt failed.
func (s *Service) shipHealth(live []*store.KVStore) (summary string, failed []string) {
	if s.snapshots == nil {
		return "", nil
	}
	s.shipMu.Lock()
	defer s.shipMu.Unlock()
	var known int
	var oldest time.Time
	for _, kv := range live {
		st := s.shipped[kv.ID]
		if st == nil {
			continue
		}
		if st.err != nil {
			failed = append(failed, fmt.Sprintf("%s (%v)", kv.ID, st.err))
		}
		if !st.shippedAt.IsZero() {
			known++
			if oldest.IsZero() || st.shippedAt.Before(oldest) {
				oldest = st.shippedAt
			}
		}
	}
	summary = fmt.Sprintf("; RDB snapshots in the backup store: %d of %d stores", known, len(live))
	if known > 0 {
		summary += ", the least recently shipped at " + oldest.UTC().Format(time.RFC3339)
	}
	return summary, failed
}
