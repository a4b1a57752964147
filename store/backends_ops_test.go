package store

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/theappliance/appliance/store/etcdembed"
)

func ids[T any](recs []*T, id func(*T) string) []string {
	out := []string{}
	for _, r := range recs {
		out = append(out, id(r))
	}
	return out
}

func projectIDs(ps []*Project) []string { return ids(ps, func(p *Project) string { return p.ID }) }

// TestTableOperations: every read and write of a table and its indexes answers the same on both backends:
// Get, Put (an index key changed), Delete, All, Lookup (oldest and newest first, After, Before, Limit),
// First, Range, Scan, Count, the meta values, the event sequence; a transaction reads its own writes
// (its cursors too) and one that fails leaves nothing behind.
func TestTableOperations(t *testing.T) { onBackends(t, testTableOperations) }

func testTableOperations(t *testing.T, db *DB) {
	put := func(ps ...*Project) {
		t.Helper()
		if err := db.Update(func(tx *Tx) error {
			for _, p := range ps {
				if err := Projects.Put(tx, p); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	// org_a holds p1..p5; org_ab (org_a's name is a prefix of it) holds p6; p7 is a preview of p1.
	for i := 1; i <= 5; i++ {
		put(&Project{ID: fmt.Sprintf("p%d", i), OrganizationID: "org_a", Name: fmt.Sprint("n", i)})
	}
	put(&Project{ID: "p6", OrganizationID: "org_ab"}, &Project{ID: "p7", OrganizationID: "org_b", PreviewOf: "p1"})
	check := func(name string, got, want []string) {
		t.Helper()
		if !slices.Equal(got, want) {
			t.Errorf("%s: %q, want %q", name, got, want)
		}
	}
	view := func(fn func(tx *Tx) error) {
		t.Helper()
		if err := db.View(fn); err != nil {
			t.Fatal(err)
		}
	}
	view(func(tx *Tx) error {
		p, err := Projects.Get(tx, "p3")
		if err != nil || p.Name != "n3" {
			return fmt.Errorf("get p3: %+v, %v", p, err)
		}
		if _, err := Projects.Get(tx, "p9"); !errors.Is(err, ErrNotFound) {
			return fmt.Errorf("get a missing record: %v", err)
		}
		all, err := Projects.All(tx, nil)
		check("all", projectIDs(all), []string{"p1", "p2", "p3", "p4", "p5", "p6", "p7"})
		some, _ := Projects.All(tx, func(p *Project) bool { return p.OrganizationID == "org_ab" })
		check("all kept", projectIDs(some), []string{"p6"})
		q := func(name string, key string, query Query, want ...string) {
			got, err := Projects.Lookup(tx, ProjectsByOrg, key, query)
			if err != nil {
				t.Fatal(err)
			}
			check(name, projectIDs(got), append([]string{}, want...))
		}
		q("lookup", "org_a", Query{}, "p1", "p2", "p3", "p4", "p5")
		q("lookup limit", "org_a", Query{Limit: 2}, "p1", "p2")
		q("lookup after", "org_a", Query{After: "p2", Limit: 2}, "p3", "p4")
		q("lookup after the last", "org_a", Query{After: "p5"})
		q("lookup newest", "org_a", Query{Newest: true}, "p5", "p4", "p3", "p2", "p1")
		q("lookup newest limit", "org_a", Query{Newest: true, Limit: 2}, "p5", "p4")
		q("lookup newest before", "org_a", Query{Newest: true, Before: "p4"}, "p3", "p2", "p1")
		q("lookup the last key newest", "org_ab", Query{Newest: true}, "p6")
		q("lookup missing", "org_x", Query{})
		q("lookup missing newest", "org_zz", Query{Newest: true})
		f, err := Projects.First(tx, ProjectsByPreviewOf, "p1")
		if err != nil || f.ID != "p7" {
			return fmt.Errorf("first preview of p1: %+v, %v", f, err)
		}
		if _, err := Projects.First(tx, ProjectsByPreviewOf, "p2"); !errors.Is(err, ErrNotFound) {
			return fmt.Errorf("first preview of p2: %v", err)
		}
		r, err := Projects.Range(tx, ProjectsByOrg, "org_a", "org_b", 0)
		check("range", projectIDs(r), []string{"p1", "p2", "p3", "p4", "p5", "p6"})
		r, _ = Projects.Range(tx, ProjectsByOrg, "org_ab", "org_c", 2)
		check("range limit", projectIDs(r), []string{"p6", "p7"})
		var scanned []string
		Projects.Scan(tx, ProjectsByOrg, "org_a", "org_a\x00", func(id string) (bool, error) {
			scanned = append(scanned, id)
			return len(scanned) < 3, nil
		})
		check("scan", scanned, []string{"p1", "p2", "p3"})
		if n, _ := Projects.Count(tx, ProjectsByOrg, "org_a"); n != 5 {
			return fmt.Errorf("count org_a: %d", n)
		}
		return err
	})
	// A record changing its index key moves in the index; a delete takes it out of both.
	put(&Project{ID: "p2", OrganizationID: "org_b", Name: "moved"})
	if err := db.Update(func(tx *Tx) error { return Projects.Delete(tx, "p4") }); err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *Tx) error { return Projects.Delete(tx, "p404") }); err != nil {
		t.Fatalf("delete a missing record: %v", err)
	}
	view(func(tx *Tx) error {
		a, _ := Projects.Lookup(tx, ProjectsByOrg, "org_a", Query{})
		check("org_a after the move and delete", projectIDs(a), []string{"p1", "p3", "p5"})
		b, _ := Projects.Lookup(tx, ProjectsByOrg, "org_b", Query{})
		check("org_b after the move", projectIDs(b), []string{"p2", "p7"})
		if _, err := Projects.Get(tx, "p4"); !errors.Is(err, ErrNotFound) {
			return fmt.Errorf("get a deleted record: %v", err)
		}
		return nil
	})
	// Within one transaction: its writes are read back (Get, Lookup both ways, Count, All), a deleted
	// record is gone from them; then it fails, and none of it stays.
	boom := errors.New("boom")
	err := db.Update(func(tx *Tx) error {
		if err := Projects.Put(tx, &Project{ID: "p8", OrganizationID: "org_a"}); err != nil {
			return err
		}
		if err := Projects.Put(tx, &Project{ID: "p0", OrganizationID: "org_a"}); err != nil {
			return err
		}
		if err := Projects.Delete(tx, "p3"); err != nil {
			return err
		}
		if err := tx.SetMeta("test_key", "v1"); err != nil {
			return err
		}
		if err := AppendEvent(tx, &Event{Type: "x"}); err != nil {
			return err
		}
		a, _ := Projects.Lookup(tx, ProjectsByOrg, "org_a", Query{})
		check("in the transaction", projectIDs(a), []string{"p0", "p1", "p5", "p8"})
		a, _ = Projects.Lookup(tx, ProjectsByOrg, "org_a", Query{Newest: true})
		check("in the transaction, newest", projectIDs(a), []string{"p8", "p5", "p1", "p0"})
		if n, _ := Projects.Count(tx, ProjectsByOrg, "org_a"); n != 4 {
			t.Errorf("count in the transaction: %d", n)
		}
		all, _ := Projects.All(tx, nil)
		check("all in the transaction", projectIDs(all), []string{"p0", "p1", "p2", "p5", "p6", "p7", "p8"})
		if _, err := Projects.Get(tx, "p3"); !errors.Is(err, ErrNotFound) {
			t.Errorf("a record deleted in the transaction: %v", err)
		}
		if tx.Meta("test_key") != "v1" || EventPosition(tx) != 1 {
			t.Errorf("in the transaction: meta %q, event position %d", tx.Meta("test_key"), EventPosition(tx))
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("the failed transaction: %v", err)
	}
	view(func(tx *Tx) error {
		a, _ := Projects.Lookup(tx, ProjectsByOrg, "org_a", Query{})
		check("after the failed transaction", projectIDs(a), []string{"p1", "p3", "p5"})
		if tx.Meta("test_key") != "" || EventPosition(tx) != 0 {
			t.Errorf("after the failed transaction: meta %q, event position %d", tx.Meta("test_key"), EventPosition(tx))
		}
		return nil
	})
	// The event log's sequence: each append the next position, kept across transactions.
	for i := range 3 {
		if err := db.Update(func(tx *Tx) error { return AppendEvent(tx, &Event{Type: fmt.Sprint("e", i), ProjectID: "p1"}) }); err != nil {
			t.Fatal(err)
		}
	}
	view(func(tx *Tx) error {
		evs, err := Events.Lookup(tx, EventsByProject, "p1", Query{Newest: true})
		check("events", ids(evs, func(e *Event) string { return fmt.Sprint(e.Seq, e.Type) }), []string{"3e2", "2e1", "1e0"})
		if EventPosition(tx) != 3 {
			t.Errorf("event position %d, want 3", EventPosition(tx))
		}
		return err
	})
	// Due keys: a range by time, earliest first.
	t0 := time.Unix(1700000000, 0)
	if err := db.Update(func(tx *Tx) error {
		for i, id := range []string{"msg_c", "msg_a", "msg_b"} {
			at := t0.Add(time.Duration(i) * time.Second)
			if err := WebhookDeliveries.Put(tx, &WebhookDelivery{ID: id, EndpointID: "we_1", State: "pending", NextAttemptAt: &at}); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	view(func(tx *Tx) error {
		ds, err := WebhookDeliveries.Range(tx, WebhookDeliveriesDue, "we_1 ", "we_1 "+DueKey(t0.Add(2*time.Second)), 0)
		check("due", ids(ds, func(d *WebhookDelivery) string { return d.ID }), []string{"msg_c", "msg_a"})
		return err
	})
}

// TestLongWalks: walks longer than a page of etcd's reads (Lookup both ways, Count, All, the series'
// deletes) see every record once, in order.
func TestLongWalks(t *testing.T) { onBackends(t, testLongWalks) }

func testLongWalks(t *testing.T, db *DB) {
	const n = 3*etcdPage + 7
	var want []string
	if err := db.Update(func(tx *Tx) error {
		for i := range n {
			id := fmt.Sprintf("ins_%04d", i)
			want = append(want, id)
			if err := Instances.Put(tx, &Instance{ID: id, ProjectID: "prj_1"}); err != nil {
				return err
			}
			if err := ObservabilitySamples.Put(tx, "prj_1", time.Unix(int64(i), 0), []byte{byte(i)}); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	insIDs := func(ins []*Instance) []string { return ids(ins, func(i *Instance) string { return i.ID }) }
	if err := db.Update(func(tx *Tx) error {
		got, err := Instances.Lookup(tx, InstancesByProject, "prj_1", Query{})
		if !slices.Equal(insIDs(got), want) {
			t.Errorf("lookup: %d records, want %d", len(got), n)
		}
		got, _ = Instances.Lookup(tx, InstancesByProject, "prj_1", Query{Newest: true})
		rev := slices.Clone(want)
		slices.Reverse(rev)
		if !slices.Equal(insIDs(got), rev) {
			t.Errorf("lookup newest: %d records, want %d", len(got), n)
		}
		if c, _ := Instances.Count(tx, InstancesByProject, "prj_1"); c != n {
			t.Errorf("count %d, want %d", c, n)
		}
		if all, _ := Instances.All(tx, nil); !slices.Equal(insIDs(all), want) {
			t.Errorf("all: %d records, want %d", len(all), n)
		}
		d, err2 := ObservabilitySamples.DeleteBefore(tx, "prj_1", time.Unix(int64(n-5), 0))
		if d != n-5 || err2 != nil {
			t.Errorf("delete before: %d, %v; want %d", d, err2, n-5)
		}
		var left []byte
		ObservabilitySamples.Range(tx, "prj_1", time.Unix(0, 0), time.Unix(int64(n), 0), func(_ time.Time, v []byte) error {
			left = append(left, v...)
			return nil
		})
		if len(left) != 5 || left[0] != byte(n-5) {
			t.Errorf("the points left in the transaction: %v", left)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
}

// TestEtcdConcurrentUpdates: two clients of one etcd (two appliances of a cluster) race read-modify-write
// transactions on one record, and insertions decided on a count of an index range: no update is lost,
// no two transactions saw the same count, and each store sees the other's commits (its tables' versions
// move, Changes receives).
func TestEtcdConcurrentUpdates(t *testing.T) {
	srv := etcdServer(t)
	prefix := newEtcdPrefix()
	var dbs [2]*DB
	for i := range dbs {
		c, err := srv.Client()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		if dbs[i], err = OpenEtcd(c, prefix); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { dbs[i].Close() })
	}
	// drain the Changes of the opening
	for _, db := range dbs {
		select {
		case <-db.Changes():
		default:
		}
	}
	before := AIUsages.Version(dbs[1])
	const workers, each = 4, 10
	var wg sync.WaitGroup
	for w := range workers {
		db := dbs[w%2]
		wg.Go(func() {
			for i := range each {
				if err := db.Update(func(tx *Tx) error {
					u, err := AIUsages.Get(tx, "prj_1/2026-11")
					if errors.Is(err, ErrNotFound) {
						u, err = &AIUsage{ID: "prj_1/2026-11", ProjectID: "prj_1"}, nil
					}
					if err != nil {
						return err
					}
					u.Used++
					return AIUsages.Put(tx, u)
				}); err != nil {
					t.Error(err)
					return
				}
				if err := db.Update(func(tx *Tx) error {
					n, err := Projects.Count(tx, ProjectsByOrg, "org_1")
					if err != nil {
						return err
					}
					return Projects.Put(tx, &Project{ID: fmt.Sprintf("prj_%d_%d", w, i), OrganizationID: "org_1", Name: fmt.Sprint("seen ", n)})
				}); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	for i, db := range dbs {
		if err := db.View(func(tx *Tx) error {
			u, err := AIUsages.Get(tx, "prj_1/2026-11")
			if err != nil {
				return err
			}
			if u.Used != workers*each {
				t.Errorf("store %d: used %d, want %d (an update was lost)", i, u.Used, workers*each)
			}
			ps, err := Projects.Lookup(tx, ProjectsByOrg, "org_1", Query{})
			if err != nil {
				return err
			}
			var names []string
			for _, p := range ps {
				names = append(names, p.Name)
			}
			slices.Sort(names)
			names = slices.Compact(names)
			if len(ps) != workers*each || len(names) != workers*each {
				t.Errorf("store %d: %d projects, %d distinct counts seen, want %d of each (two transactions saw the same range)", i, len(ps), len(names), workers*each)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	// The watch: the other store's commits reach this one's versions and Changes.
	if err := dbs[0].Update(func(tx *Tx) error { return AIUsages.Put(tx, &AIUsage{ID: "prj_2/2026-11"}) }); err != nil {
		t.Fatal(err)
	}
	var rev int
	dbs[0].View(func(tx *Tx) error { rev = tx.Generation(); return nil })
	for AIUsages.Version(dbs[1]) < uint64(rev) {
		<-dbs[1].Changes()
	}
	if AIUsages.Version(dbs[1]) <= before {
		t.Fatalf("the version did not move on the other store")
	}
}

// TestEtcdSnapshot: WriteSnapshot on etcd writes a bbolt file that Open takes as a single appliance's
// meta.db, holding exactly what the etcd store holds (every bucket, key, value and sequence: VerifyCopy),
// its generation the revision; a write after it is not in it. It is built in the spool directory, which
// holds nothing of it after, and what a killed build left there is removed by SetSpoolDir.
func TestEtcdSnapshot(t *testing.T) {
	db := openBackend(t, "etcd")
	if err := db.Update(func(tx *Tx) error {
		for i := range 50 {
			if err := Organizations.Put(tx, &Organization{ID: fmt.Sprintf("org_%05d", i), Name: "o", Slug: fmt.Sprintf("o%d", i), CreatedAt: time.Now().UTC()}); err != nil {
				return err
			}
		}
		if err := Projects.Put(tx, &Project{ID: "prj_1", OrganizationID: "org_00001", Name: "p", NodeID: "nod_2"}); err != nil {
			return err
		}
		_, err := tx.kv.bucket(Events.bucket).NextSequence()
		return err
	}); err != nil {
		t.Fatal(err)
	}
	var rev int
	db.View(func(tx *Tx) error { rev = tx.Generation(); return nil })
	path := filepath.Join(t.TempDir(), "meta.db")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	spool := t.TempDir()
	if err := os.MkdirAll(filepath.Join(spool, ".meta-snapshot-build-1", "meta.db"), 0o700); err != nil {
		t.Fatal(err)
	}
	db.SetSpoolDir(spool)
	if left, _ := filepath.Glob(filepath.Join(spool, "*")); len(left) != 0 {
		t.Fatalf("a killed build's leftover was not removed: %v", left)
	}
	var during []string
	gen, err := db.WriteSnapshot(writerFunc(func(p []byte) (int, error) {
		if during == nil {
			during, _ = filepath.Glob(filepath.Join(spool, ".meta-snapshot-build-*", "meta.db"))
		}
		return f.Write(p)
	}))
	if err == nil {
		err = f.Close()
	}
	if err != nil {
		t.Fatal(err)
	}
	if len(during) != 1 {
		t.Errorf("the snapshot was not built in the spool directory: %v", during)
	}
	if left, _ := filepath.Glob(filepath.Join(spool, "*")); len(left) != 0 {
		t.Errorf("the build left %v", left)
	}
	if gen < uint64(rev) {
		t.Fatalf("snapshot generation %d, below the revision %d the store was at before it", gen, rev)
	}
	if err := db.Update(func(tx *Tx) error {
		return Projects.Put(tx, &Project{ID: "prj_after", OrganizationID: "org_00001", Name: "p"})
	}); err != nil {
		t.Fatal(err)
	}
	snap, err := Open(path)
	if err != nil {
		t.Fatalf("open the snapshot as a bbolt store: %v", err)
	}
	defer snap.Close()
	if err := snap.View(func(tx *Tx) error {
		p, err := Projects.Get(tx, "prj_1")
		if err != nil || p.NodeID != "nod_2" {
			return fmt.Errorf("prj_1 in the snapshot: %v %+v", err, p)
		}
		if _, err := Projects.Get(tx, "prj_after"); !errors.Is(err, ErrNotFound) {
			return fmt.Errorf("a project written after the snapshot is in it: %v", err)
		}
		if got := EventPosition(tx); got != 1 {
			return fmt.Errorf("event position in the snapshot: %d, want 1", got)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *Tx) error { return Projects.Delete(tx, "prj_after") }); err != nil {
		t.Fatal(err)
	}
	if err := VerifyCopy(snap, db); err != nil {
		t.Fatalf("the snapshot against the etcd store: %v", err)
	}
}

// TestEtcdFileOperations: what only a file has is absent on etcd.
func TestEtcdFileOperations(t *testing.T) {
	db := openBackend(t, "etcd")
	if db.Path() != "" {
		t.Fatalf("path on etcd: %q", db.Path())
	}
	if err := db.Ping(); err != nil {
		t.Fatalf("ping on etcd: %v", err)
	}
	err := db.View(func(tx *Tx) error { return tx.SetMeta("k", "v") })
	if err == nil {
		t.Fatal("a write in a read-only transaction was taken")
	}
}

// TestEtcdTooLargeTransaction: a transaction past etcd's request limit fails with an error that says so
// and commits nothing.
func TestEtcdTooLargeTransaction(t *testing.T) {
	db := openBackend(t, "etcd")
	big := strings.Repeat("x", etcdembed.MaxRequestBytes+1)
	err := db.Update(func(tx *Tx) error {
		if err := Projects.Put(tx, &Project{ID: "prj_small", OrganizationID: "org_1"}); err != nil {
			return err
		}
		return Jobs.Put(tx, &Job{ID: "job_big", LastStdout: big})
	})
	if err == nil || !strings.Contains(err.Error(), "too large for etcd") {
		t.Fatalf("a transaction of %d bytes: %v", len(big), err)
	}
	if err := db.View(func(tx *Tx) error {
		if _, err := Projects.Get(tx, "prj_small"); !errors.Is(err, ErrNotFound) {
			return fmt.Errorf("the small record of the failed transaction: %v", err)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

type writerFunc func([]byte) (int, error)

func (w writerFunc) Write(p []byte) (int, error) { return w(p) }
