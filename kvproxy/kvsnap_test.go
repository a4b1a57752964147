package kvproxy_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance/appliancetest"
	"github.com/theappliance/appliance/appliance/backup"
	"github.com/theappliance/appliance/appliance/backup/s3store"
	"github.com/theappliance/appliance/appliance/backup/s3store/s3test"
	"github.com/theappliance/appliance/store"
)

// bucketKVEnv is a kvEnv whose backup store is a bucket of a real S3 server (versitygw), and the
// project-level store on that bucket.
func bucketKVEnv(t *testing.T) (*kvEnv, *backup.Store, *s3test.Server) {
	t.Helper()
	srv := s3test.Start(t)
	var bs *backup.Store
	k := newKVEnvWith(t, appliancetest.Options{
		BackupObjects: func(dir string, chown func(string) error) (backup.Objects, error) {
			cfg := srv.Config("appliance/")
			cfg.DataKey = make([]byte, 32)
			rand.Read(cfg.DataKey)
			cfg.Spool, cfg.Chown = filepath.Join(dir, "spool"), chown
			b, err := s3store.New(cfg)
			if err != nil {
				return nil, err
			}
			bs = backup.New(b)
			return b, nil
		}})
	return k, bs, srv
}

// TestKVSnapshotsInTheBucket: with a bucket as the backup store, a store's saved RDB snapshot is shipped
// once (an idle store uploads nothing again); when the store starts with no data directory, its newest
// snapshot is fetched into place before redis-server starts (a half-written newer upload, without its
// manifest, is ignored), so the keys it held are back and nothing written after it; an identical
// fetched file is not shipped again; a local dump.rdb is never replaced; with the bucket away a save is
// not shipped and the status row names the store, and it is shipped once the bucket is back; the newest 3
// are kept; deleting the store, and the project, deletes its objects.
func TestKVSnapshotsInTheBucket(t *testing.T) {
	t.Parallel()
	k, bs, s3 := bucketKVEnv(t)
	ctx := t.Context()
	prj := k.project(t, "snap")
	kv := k.store(t, prj)
	kvs := k.Svc.KV()
	ship := func(want int) {
		t.Helper()
		if n, err := kvs.ShipSnapshots(ctx); err != nil || n != want {
			t.Fatalf("shipped %d snapshots (want %d): %v", n, want, err)
		}
	}
	save := func() {
		t.Helper()
		var r *store.KVStore
		if err := k.DB.View(func(tx *store.Tx) (err error) { r, err = store.KVStores.Get(tx, kv.ID); return err }); err != nil {
			t.Fatal(err)
		}
		srv, admin, err := kvs.Server(r)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := srv.Admin(ctx, admin, []string{"SAVE"}); err != nil {
			t.Fatal(err)
		}
	}
	objects := func(prefix string) []string {
		t.Helper()
		l, err := bs.Objects.List(ctx, prefix)
		if err != nil {
			t.Fatal(err)
		}
		var keys []string
		for _, in := range l {
			keys = append(keys, in.Key)
		}
		return keys
	}
	prefix := prj + "/kv/" + kv.ID + "/"

	ship(0) // nothing saved yet
	c := k.client(t, *kv.Token, 2)
	for i := range 100 {
		if err := c.Set(ctx, fmt.Sprintf("key:%d", i), fmt.Sprintf("val:%d", i), 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	save()
	ship(1)
	ship(0) // idle: the same file
	if st, msg := kvs.Health(ctx); !strings.Contains(msg, "RDB snapshots in the backup store: 1 of 1 stores") {
		t.Fatalf("status row: %s %s", st, msg)
	}
	first, err := bs.LatestKVSnapshot(ctx, prj, kv.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got := objects(prefix); len(got) != 2 || got[0] != prefix+first.ID+".json" || got[1] != first.Key {
		t.Fatalf("objects after one snapshot: %q", got)
	}
	// A newer upload killed before its manifest, and a key the shipped snapshot lacks.
	if _, err := bs.Objects.Put(ctx, prefix+"29990101T000000.000000000Z.rdb", strings.NewReader("not an RDB file")); err != nil {
		t.Fatal(err)
	}
	if err := c.Set(ctx, "after", "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	c.Close()

	// The machine lost the stores' directory: the start fetches the snapshot.
	stopAll(t, k)
	dir := kvDir(t, k, prj)
	if err := os.RemoveAll(filepath.Dir(dir)); err != nil {
		t.Fatal(err)
	}
	if err := kvs.Adopt(ctx); err != nil {
		t.Fatal(err)
	}
	c2 := k.client(t, *kv.Token, 3)
	waitFor(t, func() bool { v, _ := c2.Get(ctx, "key:99").Result(); return v == "val:99" })
	for i := range 100 {
		if v, err := c2.Get(ctx, fmt.Sprintf("key:%d", i)).Result(); err != nil || v != fmt.Sprintf("val:%d", i) {
			t.Fatalf("key:%d after the fetch: %q %v", i, v, err)
		}
	}
	if n, err := c2.Exists(ctx, "after").Result(); err != nil || n != 0 {
		t.Fatalf("a key written after the snapshot is back: %d %v", n, err)
	}
	ship(0) // the fetched file is the newest snapshot

	// A local dump.rdb is the store's data: never replaced by the bucket's.
	if err := c2.Set(ctx, "local", "y", 0).Err(); err != nil {
		t.Fatal(err)
	}
	save()
	stopAll(t, k)
	if err := kvs.Adopt(ctx); err != nil {
		t.Fatal(err)
	}
	c3 := k.client(t, *kv.Token, 2)
	waitFor(t, func() bool { v, _ := c3.Get(ctx, "local").Result(); return v == "y" })
	ship(1)
	if got, err := bs.LatestKVSnapshot(ctx, prj, kv.ID); err != nil || got.ID <= first.ID {
		t.Fatalf("the newest snapshot after a save: %+v %v", got, err)
	}
	// The bucket away: the save is not shipped, the status row says so; back, it is shipped.
	if err := c3.Set(ctx, "while-away", "z", 0).Err(); err != nil {
		t.Fatal(err)
	}
	save()
	s3.Stop()
	away, cancel := context.WithTimeout(ctx, 3*time.Second)
	n, err := kvs.ShipSnapshots(away)
	cancel()
	if n != 0 || err == nil || !strings.Contains(err.Error(), kv.ID) {
		t.Fatalf("shipping with the bucket away: %d %v", n, err)
	}
	if st, msg := kvs.Health(ctx); st != api.StatusDegraded || !strings.Contains(msg, "could not be shipped to the backup store: "+kv.ID) {
		t.Fatalf("status row with the bucket away: %s %s", st, msg)
	}
	s3.Restart()
	ship(1)
	if st, msg := kvs.Health(ctx); st != api.StatusOperational {
		t.Fatalf("status row with the bucket back: %s %s", st, msg)
	}
	// Only the newest few are kept.
	for i := range 4 {
		if err := c3.Set(ctx, "n", i, 0).Err(); err != nil {
			t.Fatal(err)
		}
		save()
		ship(1)
	}
	var manifests int
	for _, key := range objects(prefix) {
		if strings.HasSuffix(key, ".json") {
			manifests++
		}
	}
	if manifests != 3 {
		t.Fatalf("%d snapshots kept, want 3: %q", manifests, objects(prefix))
	}

	// Deleting the store deletes its objects.
	del, err := kvs.Delete(ctx, k.p, prj)
	if err != nil {
		t.Fatal(err)
	}
	k.wait(t, del.Job.ID)
	if got := objects(prj + "/kv/"); len(got) != 0 {
		t.Fatalf("objects left after the store's delete: %q", got)
	}
	if _, err := bs.LatestKVSnapshot(ctx, prj, kv.ID); !errors.Is(err, backup.ErrNotExist) {
		t.Fatalf("a snapshot of the deleted store: %v", err)
	}

	// A new store's snapshots go with its project.
	again := k.store(t, prj)
	if err := k.client(t, *again.Token, 2).Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	kv = again
	save()
	ship(1)
	if got := objects(prj + "/kv/" + again.ID + "/"); len(got) != 2 {
		t.Fatalf("the new store's objects: %q", got)
	}
	pd, err := k.Svc.DeleteProject(ctx, k.p, prj, "")
	if err != nil {
		t.Fatal(err)
	}
	k.wait(t, pd.Job.ID)
	if got := objects(prj + "/"); len(got) != 0 {
		t.Fatalf("objects left after the project's delete: %q", got)
	}
}

// TestKVLastSnapshotShippedAtStop: the snapshot a store saves as the appliance stops it goes to the
// bucket as the stop ends, with what was written just before.
func TestKVLastSnapshotShippedAtStop(t *testing.T) {
	t.Parallel()
	k, bs, _ := bucketKVEnv(t)
	ctx := t.Context()
	prj := k.project(t, "laststop")
	kv := k.store(t, prj)
	if err := k.client(t, *kv.Token, 2).Set(ctx, "lastkey", "lastval", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := bs.LatestKVSnapshot(ctx, prj, kv.ID); !errors.Is(err, backup.ErrNotExist) {
		t.Fatalf("a snapshot before the stop: %v", err)
	}
	k.Sup.Stop(ctx)
	if err := k.Svc.StopInstances(ctx); err != nil {
		t.Fatal(err)
	}
	m, err := bs.LatestKVSnapshot(ctx, prj, kv.ID)
	if err != nil {
		t.Fatal(err)
	}
	var rdb bytes.Buffer
	if err := bs.ReadKVSnapshot(ctx, m, &rdb); err != nil {
		t.Fatal(err)
	}
	// Short strings are stored as they are in an RDB file.
	if !bytes.HasPrefix(rdb.Bytes(), []byte("REDIS")) || !bytes.Contains(rdb.Bytes(), []byte("lastkey")) || !bytes.Contains(rdb.Bytes(), []byte("lastval")) {
		t.Fatalf("the shipped snapshot lacks the key: %q", rdb.Bytes())
	}
}
