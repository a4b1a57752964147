package backup

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// Key-value stores' RDB snapshots, kept for disaster recovery (a store's data when its machine is lost):
//
//	<project_id>/kv/<store_id>/<id>.rdb    the store's dump.rdb as redis-server saved it
//	<project_id>/kv/<store_id>/<id>.json   its manifest (KVSnapshot), written last
//
// A snapshot is its manifest: an .rdb without one (an upload killed midway) is never read, and pruning
// removes it once a newer manifest exists. <id> is a UTC time (kvIDLayout), sortable: the file's
// modification time, moved past the newest id already there when it is not later, so the newest shipped
// snapshot is the last manifest listed whatever the clocks did.

// KVSnapshot is the manifest of a key-value store's snapshot.
type KVSnapshot struct {
	Version   int       `json:"version"` // 1
	ID        string    `json:"id"`
	Key       string    `json:"key"` // the .rdb object
	Size      int64     `json:"size"`
	SHA256    string    `json:"sha256"`
	FileTime  time.Time `json:"file_time"`  // the modification time of the dump.rdb shipped
	ShippedAt time.Time `json:"shipped_at"` // when its manifest was written
}

const kvIDLayout = "20060102T150405.000000000Z"

func kvPrefix(projectID, storeID string) string { return projectID + "/kv/" + storeID + "/" }

func checkKV(projectID, storeID string) error {
	if err := checkName("project id", projectID); err != nil {
		return err
	}
	return checkName("key-value store id", storeID)
}

// kvManifestIDs lists the ids of a store's snapshot manifests, oldest first, and every object under its
// prefix.
func (s *Store) kvManifestIDs(ctx context.Context, projectID, storeID string) ([]string, []Info, error) {
	prefix := kvPrefix(projectID, storeID)
	all, err := s.Objects.List(ctx, prefix)
	if err != nil {
		return nil, nil, fmt.Errorf("list the snapshots of key-value store %s: %w", storeID, err)
	}
	var ids []string
	for _, in := range all {
		if id, ok := strings.CutSuffix(strings.TrimPrefix(in.Key, prefix), ".json"); ok && !strings.Contains(id, "/") {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids, all, nil
}

// PutKVSnapshot stores r (a store's dump.rdb, modified at fileTime) as the store's newest snapshot: the
// .rdb object, then its manifest; then it prunes the snapshots beyond the newest keep (at least 1) and the
// manifest-less leftovers older than the new one. When it returns the manifest, the snapshot is complete.
func (s *Store) PutKVSnapshot(ctx context.Context, projectID, storeID string, r io.Reader, fileTime, now time.Time, keep int) (*KVSnapshot, error) {
	if err := checkKV(projectID, storeID); err != nil {
		return nil, err
	}
	ids, _, err := s.kvManifestIDs(ctx, projectID, storeID)
	if err != nil {
		return nil, err
	}
	t := fileTime.UTC()
	if len(ids) > 0 {
		if newest, err := time.Parse(kvIDLayout, ids[len(ids)-1]); err == nil && !t.After(newest) {
			t = newest.Add(time.Nanosecond)
		}
	}
	prefix := kvPrefix(projectID, storeID)
	m := &KVSnapshot{Version: 1, ID: t.Format(kvIDLayout), FileTime: fileTime.UTC()}
	m.Key = prefix + m.ID + ".rdb"
	h := sha256.New()
	if m.Size, err = s.Objects.Put(ctx, m.Key, io.TeeReader(r, h)); err != nil {
		return nil, fmt.Errorf("put the snapshot of key-value store %s: %w", storeID, err)
	}
	m.SHA256 = hex.EncodeToString(h.Sum(nil))
	m.ShippedAt = now.UTC()
	body, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, err
	}
	if _, err := s.Objects.Put(ctx, prefix+m.ID+".json", strings.NewReader(string(body))); err != nil {
		return nil, fmt.Errorf("put the snapshot manifest of key-value store %s: %w", storeID, err)
	}
	if err := s.pruneKV(ctx, projectID, storeID, max(keep, 1)); err != nil {
		return m, fmt.Errorf("snapshot %s of key-value store %s written; pruning older ones: %w", m.ID, storeID, err)
	}
	return m, nil
}

// pruneKV deletes the snapshots beyond the newest keep (the manifest first: a snapshot is gone the moment
// its manifest is) and the objects without a manifest older than the newest manifest (a newer one may be
// an upload under way).
func (s *Store) pruneKV(ctx context.Context, projectID, storeID string, keep int) error {
	ids, all, err := s.kvManifestIDs(ctx, projectID, storeID)
	if err != nil || len(ids) == 0 {
		return err
	}
	prefix := kvPrefix(projectID, storeID)
	for len(ids) > keep {
		if err := s.Objects.Delete(ctx, prefix+ids[0]+".json"); err != nil {
			return err
		}
		if err := s.Objects.Delete(ctx, prefix+ids[0]+".rdb"); err != nil {
			return err
		}
		ids = ids[1:]
	}
	newest := ids[len(ids)-1]
	var doomed []string
	for _, in := range all {
		name := strings.TrimPrefix(in.Key, prefix)
		id, ok := strings.CutSuffix(name, ".rdb")
		if !ok || strings.Contains(id, "/") {
			continue
		}
		if id < newest && !slices.Contains(ids, id) {
			doomed = append(doomed, in.Key)
		}
	}
	return s.Objects.Delete(ctx, doomed...)
}

// LatestKVSnapshot reads the manifest of the store's newest complete snapshot; none is ErrNotExist
// (wrapped).
func (s *Store) LatestKVSnapshot(ctx context.Context, projectID, storeID string) (*KVSnapshot, error) {
	if err := checkKV(projectID, storeID); err != nil {
		return nil, err
	}
	ids, _, err := s.kvManifestIDs(ctx, projectID, storeID)
	if err != nil {
		return nil, err
	}
	if len(ids) == 0 {
		return nil, fmt.Errorf("no snapshot of key-value store %s in the backup store: %w", storeID, ErrNotExist)
	}
	key := kvPrefix(projectID, storeID) + ids[len(ids)-1] + ".json"
	r, err := s.Objects.Get(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("read the snapshot manifest %s: %w", key, err)
	}
	defer r.Close()
	var m KVSnapshot
	if err := json.NewDecoder(io.LimitReader(r, 1<<20)).Decode(&m); err != nil {
		return nil, fmt.Errorf("read the snapshot manifest %s: %w", key, err)
	}
	if m.Version != 1 {
		return nil, fmt.Errorf("snapshot manifest %s: version %d is not supported", key, m.Version)
	}
	if m.Key != kvPrefix(projectID, storeID)+m.ID+".rdb" {
		return nil, fmt.Errorf("snapshot manifest %s names the object %q, not its own", key, m.Key)
	}
	return &m, nil
}

// ReadKVSnapshot writes the snapshot m's file to w, checked against its manifest's size and SHA-256 (an
// error names the object; w has then received bytes that must not be used).
func (s *Store) ReadKVSnapshot(ctx context.Context, m *KVSnapshot, w io.Writer) error {
	r, err := s.Objects.Get(ctx, m.Key)
	if err != nil {
		return fmt.Errorf("read %s: %w", m.Key, err)
	}
	defer r.Close()
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(w, h), r)
	if err != nil {
		return fmt.Errorf("read %s: %w", m.Key, err)
	}
	if n != m.Size || hex.EncodeToString(h.Sum(nil)) != m.SHA256 {
		return fmt.Errorf("%s: %d bytes with another checksum than its manifest's (%d bytes)", m.Key, n, m.Size)
	}
	return nil
}

// RemoveKVSnapshots deletes every snapshot of a store: the manifests first, then the rest of its prefix.
// A store without any is not an error.
func (s *Store) RemoveKVSnapshots(ctx context.Context, projectID, storeID string) error {
	if err := checkKV(projectID, storeID); err != nil {
		return err
	}
	ids, _, err := s.kvManifestIDs(ctx, projectID, storeID)
	if err != nil {
		return err
	}
	keys := make([]string, len(ids))
	for i, id := range ids {
		keys[i] = kvPrefix(projectID, storeID) + id + ".json"
	}
	if err := s.Objects.Delete(ctx, keys...); err != nil {
		return fmt.Errorf("remove the snapshots of key-value store %s: %w", storeID, err)
	}
	if _, err := s.Objects.DeleteAll(ctx, kvPrefix(projectID, storeID)); err != nil {
		return fmt.Errorf("remove the snapshots of key-value store %s: %w", storeID, err)
	}
	return nil
}
