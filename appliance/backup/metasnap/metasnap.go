// Package metasnap keeps the appliance's own metadata off the machine: after every change of the
// metadata store (coalesced, at most one snapshot per Interval), a consistent copy of meta.db (bbolt's
// Tx.WriteTo), the CA's files and the sealing key go to the backup store as objects under "meta/":
//
//	meta/snapshots/<id>/meta.db
//	meta/snapshots/<id>/files/<path relative to the data directory>   (ca/ca.crt, ca/ca.key, secret.key)
//	meta/manifests/<id>.json                                          (written last)
//
// The manifest names every object of its snapshot with its size and SHA-256, and the store generation the
// copy of meta.db is at; a snapshot without its manifest (an upload killed midway) is not a snapshot:
// LatestSnapshot reads manifests only, and pruning removes such leftovers. <id> is the snapshot's UTC time
// (sortable), so the newest manifest is the last one listed. The last Keep snapshots are kept.
//
// The objects are sealed with a key derived from the operator's recovery key (SnapshotKey), not from the
// sealing key they contain: the caller opens the same bucket (s3store) with that key for these objects.
// A machine that lost its disk is rebuilt from the recovery key and the bucket alone.
package metasnap

import (
	"context"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/theappliance/appliance/appliance/backup"
	"github.com/theappliance/appliance/store"
)

const (
	// Prefix is where the snapshots live in the backup store.
	Prefix          = "meta/"
	manifestsPrefix = Prefix + "manifests/"
	snapshotsPrefix = Prefix + "snapshots/"
	// DBName is meta.db's name in a snapshot (and in the data directory).
	DBName = "meta.db"
	// keyInfo is the HKDF info of the snapshot key; changing it loses every snapshot.
	keyInfo = "appliance metadata snapshot key v1"
	// DefaultInterval is the shortest time between two snapshots (the metadata's RPO is about this plus
	// an upload).
	DefaultInterval = 3 * time.Second
	// DefaultKeep is how many snapshots are kept.
	DefaultKeep = 10
	// retryDelay is how long after a failed snapshot the next attempt is made.
	retryDelay = 5 * time.Second
	idLayout   = "20060102T150405.000000000Z"
	// tempPattern names the copies of meta.db spooled in the data directory.
	tempPattern = ".meta-snapshot-*"
)

// Manifest describes a complete snapshot.
type Manifest struct {
	Version    int       `json:"version"` // 1
	ID         string    `json:"id"`
	Created    time.Time `json:"created"`
	Generation uint64    `json:"generation"` // the store generation of the copy of meta.db
	Objects    []Object  `json:"objects"`
}

// Object is one object of a snapshot: Name is its path relative to the data directory (DBName for the
// store's file).
type Object struct {
	Name   string `json:"name"`
	Key    string `json:"key"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// SnapshotKey is the key that seals the snapshot objects, derived from the recovery key (HKDF-SHA256).
func SnapshotKey(recoveryKey []byte) ([]byte, error) {
	if len(recoveryKey) != RecoveryKeySize {
		return nil, fmt.Errorf("recovery key: %d bytes, want %d", len(recoveryKey), RecoveryKeySize)
	}
	return hkdf.Key(sha256.New, recoveryKey, nil, keyInfo, 32)
}

// RecoveryKeySize is the recovery key's length in bytes (written as twice as many hex digits).
const RecoveryKeySize = 32

// LoadOrCreateRecoveryKey reads the recovery key file at path (64 hex digits), creating it (mode 0600,
// a new random key) when there is none; created says it was made now (the caller shows it, once).
func LoadOrCreateRecoveryKey(path string) (key []byte, created bool, err error) {
	key, err = ReadRecoveryKey(path)
	if err == nil || !errors.Is(err, os.ErrNotExist) {
		return key, false, err
	}
	key = make([]byte, RecoveryKeySize)
	if _, err := rand.Read(key); err != nil {
		return nil, false, err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, false, fmt.Errorf("create the recovery key: %w", err)
	}
	_, err = io.WriteString(f, hex.EncodeToString(key)+"\n")
	if err == nil {
		err = f.Sync()
	}
	if err = errors.Join(err, f.Close()); err != nil {
		os.Remove(path)
		return nil, false, fmt.Errorf("write the recovery key %s: %w", path, err)
	}
	return key, true, nil
}

// ReadRecoveryKey reads a recovery key file (64 hex digits; surrounding white space ignored).
func ReadRecoveryKey(path string) ([]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read the recovery key: %w", err)
	}
	key, err := hex.DecodeString(strings.TrimSpace(string(data)))
	if err != nil || len(key) != RecoveryKeySize {
		return nil, fmt.Errorf("%s: not a recovery key (want %d hexadecimal digits)", path, 2*RecoveryKeySize)
	}
	return key, nil
}

// Snapshotter writes the snapshots.
type Snapshotter struct {
	DB *store.DB
	// Objects is the backup store, sealed with SnapshotKey of the recovery key.
	Objects backup.Objects
	// DataDir and Files: the files copied with meta.db, relative to DataDir (slash-separated).
	DataDir string
	Files   []string
	// Interval is the shortest time between two snapshots (0: DefaultInterval); Keep how many are kept
	// (0: DefaultKeep).
	Interval time.Duration
	Keep     int
	Log      *slog.Logger
	// now is time.Now (tests).
	now func() time.Time

	mu                 sync.Mutex
	lastOK, lastChange time.Time // the last snapshot that succeeded; the oldest change it lacks (zero: none)
	lastErr            error
	lastGen            uint64
}

// Run takes a snapshot at once, then one after each change of the store (coalesced: at most one per
// Interval), until ctx is done; then, if a change is not in the bucket yet, one last attempt (within 10
// seconds). A failed snapshot is logged and retried; it never holds writers of the store.
func (s *Snapshotter) Run(ctx context.Context) {
	interval := s.Interval
	if interval <= 0 {
		interval = DefaultInterval
	}
	// Copies of meta.db left by a process killed during a snapshot.
	if stale, _ := filepath.Glob(filepath.Join(s.DataDir, tempPattern)); len(stale) > 0 {
		for _, f := range stale {
			os.Remove(f)
		}
	}
	dirty := true
	s.noteChange()
	var last time.Time
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			if dirty {
				final, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
				s.attempt(final)
				cancel()
			}
			return
		case <-s.DB.Changes():
			s.noteChange()
			if !dirty {
				dirty = true
				timer.Reset(max(0, time.Until(last.Add(interval))))
			}
		case <-timer.C:
			last = time.Now()
			if s.attempt(ctx) {
				dirty = false
			} else {
				timer.Reset(retryDelay)
			}
		}
	}
}

func (s *Snapshotter) noteChange() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lastChange.IsZero() {
		s.lastChange = time.Now()
	}
}

// attempt takes one snapshot and records the outcome.
func (s *Snapshotter) attempt(ctx context.Context) bool {
	started := time.Now()
	m, err := s.Snapshot(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lastErr = err
	if err != nil {
		if s.Log != nil {
			s.Log.Warn("metadata snapshot failed; retrying", "err", err, "retry_in", retryDelay)
		}
		return false
	}
	s.lastOK, s.lastGen = started, m.Generation
	if !s.lastChange.IsZero() && !s.lastChange.After(started) {
		s.lastChange = time.Time{}
	}
	return true
}

// Health is the status row: the last snapshot's time and how long the newest change has waited for one;
// ok is false when the last attempt failed.
func (s *Snapshotter) Health() (ok bool, message string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	lag := time.Duration(0)
	if !s.lastChange.IsZero() {
		lag = time.Since(s.lastChange).Round(time.Second)
	}
	switch {
	case s.lastOK.IsZero() && s.lastErr != nil:
		return false, fmt.Sprintf("no snapshot yet: %v", s.lastErr)
	case s.lastOK.IsZero():
		return true, "first snapshot under way"
	case s.lastErr != nil:
		return false, fmt.Sprintf("last snapshot %s (generation %d), lag %s; the last attempt failed: %v",
			s.lastOK.UTC().Format(time.RFC3339), s.lastGen, lag, s.lastErr)
	}
	return true, fmt.Sprintf("last snapshot %s (generation %d), lag %s", s.lastOK.UTC().Format(time.RFC3339), s.lastGen, lag)
}

// Snapshot writes one snapshot (its objects, then its manifest) and prunes the older ones beyond Keep.
func (s *Snapshotter) Snapshot(ctx context.Context) (*Manifest, error) {
	now := time.Now
	if s.now != nil {
		now = s.now
	}
	created := now().UTC()
	m := &Manifest{Version: 1, ID: created.Format(idLayout), Created: created}
	dir := snapshotsPrefix + m.ID + "/"

	// meta.db: a consistent copy written to a temporary file first (a read transaction held for the
	// upload's length would keep bbolt from reusing pages).
	tmp, err := os.CreateTemp(s.DataDir, tempPattern)
	if err != nil {
		return nil, fmt.Errorf("metadata snapshot: %w", err)
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	if m.Generation, err = s.DB.WriteSnapshot(tmp); err != nil {
		return nil, fmt.Errorf("metadata snapshot: copy the store: %w", err)
	}
	if _, err := tmp.Seek(0, io.SeekStart); err != nil {
		return nil, fmt.Errorf("metadata snapshot: %w", err)
	}
	o, err := s.put(ctx, DBName, dir+DBName, tmp)
	if err != nil {
		return nil, err
	}
	m.Objects = append(m.Objects, o)
	for _, name := range s.Files {
		f, err := os.Open(filepath.Join(s.DataDir, filepath.FromSlash(name)))
		if err != nil {
			return nil, fmt.Errorf("metadata snapshot: %w", err)
		}
		o, err := s.put(ctx, name, dir+"files/"+name, f)
		f.Close()
		if err != nil {
			return nil, err
		}
		m.Objects = append(m.Objects, o)
	}
	body, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, err
	}
	if _, err := s.Objects.Put(ctx, manifestsPrefix+m.ID+".json", strings.NewReader(string(body))); err != nil {
		return nil, fmt.Errorf("metadata snapshot: put the manifest: %w", err)
	}
	if err := s.prune(ctx); err != nil {
		return m, fmt.Errorf("metadata snapshot %s written; pruning older ones: %w", m.ID, err)
	}
	return m, nil
}

func (s *Snapshotter) put(ctx context.Context, name, key string, r io.Reader) (Object, error) {
	h := sha256.New()
	n, err := s.Objects.Put(ctx, key, io.TeeReader(r, h))
	if err != nil {
		return Object{}, fmt.Errorf("metadata snapshot: put %s: %w", name, err)
	}
	return Object{Name: name, Key: key, Size: n, SHA256: hex.EncodeToString(h.Sum(nil))}, nil
}

// prune deletes the snapshots beyond the newest Keep, and the objects of snapshots that have no manifest
// and are older than the newest manifest (leftovers of killed uploads).
func (s *Snapshotter) prune(ctx context.Context) error {
	keep := s.Keep
	if keep <= 0 {
		keep = DefaultKeep
	}
	ids, err := manifestIDs(ctx, s.Objects)
	if err != nil {
		return err
	}
	if len(ids) == 0 {
		return nil
	}
	for len(ids) > keep {
		// The manifest first: a snapshot is gone the moment its manifest is.
		if err := s.Objects.Delete(ctx, manifestsPrefix+ids[0]+".json"); err != nil {
			return err
		}
		if _, err := s.Objects.DeleteAll(ctx, snapshotsPrefix+ids[0]+"/"); err != nil {
			return err
		}
		ids = ids[1:]
	}
	all, err := s.Objects.List(ctx, snapshotsPrefix)
	if err != nil {
		return err
	}
	newest := ids[len(ids)-1]
	for _, in := range all {
		id, _, _ := strings.Cut(strings.TrimPrefix(in.Key, snapshotsPrefix), "/")
		if id < newest && !slices.Contains(ids, id) {
			if err := s.Objects.Delete(ctx, in.Key); err != nil {
				return err
			}
		}
	}
	return nil
}

// manifestIDs lists the ids of the manifests, oldest first.
func manifestIDs(ctx context.Context, objs backup.Objects) ([]string, error) {
	all, err := objs.List(ctx, manifestsPrefix)
	if err != nil {
		return nil, fmt.Errorf("list the metadata snapshots: %w", err)
	}
	var ids []string
	for _, in := range all {
		if id, ok := strings.CutSuffix(strings.TrimPrefix(in.Key, manifestsPrefix), ".json"); ok && !strings.Contains(id, "/") {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids, nil
}

// ErrNoSnapshot is LatestSnapshot's error when the store holds no complete snapshot.
var ErrNoSnapshot = errors.New("no metadata snapshot in the backup store")

// LatestSnapshot reads the newest complete snapshot's manifest (objects without a manifest are not a
// snapshot). objs must be sealed with SnapshotKey of the recovery key: with another key, reading fails
// (the error names the object).
func LatestSnapshot(ctx context.Context, objs backup.Objects) (*Manifest, error) {
	ids, err := manifestIDs(ctx, objs)
	if err != nil {
		return nil, err
	}
	if len(ids) == 0 {
		return nil, ErrNoSnapshot
	}
	key := manifestsPrefix + ids[len(ids)-1] + ".json"
	r, err := objs.Get(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("read the metadata snapshot manifest %s: %w", key, err)
	}
	defer r.Close()
	var m Manifest
	if err := json.NewDecoder(r).Decode(&m); err != nil {
		return nil, fmt.Errorf("read the metadata snapshot manifest %s: %w", key, err)
	}
	if m.Version != 1 {
		return nil, fmt.Errorf("metadata snapshot manifest %s: version %d is not supported", key, m.Version)
	}
	return &m, nil
}

// Restore writes the snapshot's files under dir (meta.db and the files at their paths relative to the
// data directory, mode 0600, directories 0700), each checked against the manifest's size and SHA-256.
// Files are written to a temporary name and renamed: a failed Restore leaves no partial file under a
// final name.
func Restore(ctx context.Context, objs backup.Objects, m *Manifest, dir string) error {
	for _, o := range m.Objects {
		if o.Name == "" || path.IsAbs(o.Name) || path.Clean(o.Name) != o.Name || strings.HasPrefix(o.Name, "../") || o.Name == ".." {
			return fmt.Errorf("metadata snapshot %s: invalid file name %q", m.ID, o.Name)
		}
		if err := restoreOne(ctx, objs, o, filepath.Join(dir, filepath.FromSlash(o.Name))); err != nil {
			return fmt.Errorf("metadata snapshot %s: %w", m.ID, err)
		}
	}
	return nil
}

func restoreOne(ctx context.Context, objs backup.Objects, o Object, dst string) (err error) {
	if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		return err
	}
	r, err := objs.Get(ctx, o.Key)
	if err != nil {
		return fmt.Errorf("read %s: %w", o.Key, err)
	}
	defer r.Close()
	f, err := os.CreateTemp(filepath.Dir(dst), ".restore-*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(f, h), r)
	if err != nil {
		return fmt.Errorf("read %s: %w", o.Key, err)
	}
	if n != o.Size || hex.EncodeToString(h.Sum(nil)) != o.SHA256 {
		return fmt.Errorf("%s: %d bytes with another checksum than the manifest's (%d bytes)", o.Key, n, o.Size)
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), dst)
}
