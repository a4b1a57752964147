package batch

import (
	"errors"
	"log/slog"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/theappliance/appliance/store"
)

// TestBatchWriter: items handed over together share a commit; an item that fails is refused alone and the
// others of its batch are written; a Flush waits for what came before it; Close ends Run after writing.
func TestBatchWriter(t *testing.T) {
	db, err := store.Open(filepath.Join(t.TempDir(), "meta.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	bad := errors.New("bad item")
	gate := make(chan struct{}) // holds the first transaction until every writer waits
	var once sync.Once
	var holding atomic.Pointer[chan struct{}] // holds the next transaction until closed
	w := New(db, nil, 100, 0, 0, slog.New(slog.DiscardHandler), "test items", func(tx *store.Tx, id string) error {
		once.Do(func() { <-gate })
		if h := holding.Swap(nil); h != nil {
			<-*h
		}
		if id == "bad" {
			return bad
		}
		return store.AuditEvents.Put(tx, &store.AuditEvent{ID: id, Action: "test", CreatedAt: time.Now()})
	})
	done := make(chan struct{})
	go func() { defer close(done); w.Run() }()
	generation := func() int {
		var g int
		db.View(func(tx *store.Tx) error { g = tx.Generation(); return nil })
		return g
	}
	before := generation()
	first := make(chan error, 1)
	go func() { first <- w.Write("a0") }()
	time.Sleep(20 * time.Millisecond) // a0 is taken alone and held at the gate
	var wg sync.WaitGroup
	errs := map[string]error{}
	var mu sync.Mutex
	for _, id := range []string{"a1", "a2", "bad", "a3"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := w.Write(id)
			mu.Lock()
			errs[id] = err
			mu.Unlock()
		}()
	}
	time.Sleep(20 * time.Millisecond) // the four wait to be taken
	close(gate)
	wg.Wait()
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	for id, err := range errs {
		if (id == "bad") != errors.Is(err, bad) {
			t.Errorf("%s: %v", id, err)
		}
	}
	// a0's commit, the four's failed one (no commit), then a1, a2, a3 alone (bad rolls back).
	if n := generation() - before; n != 4 {
		t.Errorf("%d commits, want 4 (the first alone, then the three good ones of a failed batch one by one)", n)
	}
	for _, id := range []string{"a0", "a1", "a2", "a3"} {
		if err := db.View(func(tx *store.Tx) error { _, err := store.AuditEvents.Get(tx, id); return err }); err != nil {
			t.Errorf("%s: %v", id, err)
		}
	}
	// Three good ones waiting together: one commit.
	hold := make(chan struct{})
	holding.Store(&hold)
	go w.Write("b0")
	time.Sleep(20 * time.Millisecond)
	before = generation()
	for _, id := range []string{"b1", "b2", "b3"} {
		wg.Add(1)
		go func() { defer wg.Done(); w.Write(id) }()
	}
	time.Sleep(20 * time.Millisecond)
	close(hold)
	wg.Wait()
	if n := generation() - before; n != 2 {
		t.Errorf("%d commits for b0 and the three that waited behind it, want 2", n)
	}
	for range 3 {
		w.Add("later")
	}
	if err := w.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := db.View(func(tx *store.Tx) error { _, err := store.AuditEvents.Get(tx, "later"); return err }); err != nil {
		t.Errorf("after a flush: %v", err)
	}
	w.Close()
	<-done
}

// TestBatchWriterSenderWaitsNoLinger: an item whose sender waits (write) is committed with what is queued,
// not after the linger (an hour here), and one that does not wait is still held for it.
func TestBatchWriterSenderWaitsNoLinger(t *testing.T) {
	db, err := store.Open(filepath.Join(t.TempDir(), "meta.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	w := New(db, nil, 100, time.Hour, 16, slog.New(slog.DiscardHandler), "test items", func(tx *store.Tx, id string) error {
		return store.AuditEvents.Put(tx, &store.AuditEvent{ID: id, Action: "test", CreatedAt: time.Now()})
	})
	go w.Run()
	defer w.Close()
	has := func(id string) bool {
		found := false
		db.View(func(tx *store.Tx) error { _, err := store.AuditEvents.Get(tx, id); found = err == nil; return nil })
		return found
	}
	w.Add("queued") // lingers, waiting for more
	done := make(chan error, 1)
	go func() { done <- w.Write("waited") }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute):
		t.Fatal("a waiting sender was held for the linger")
	}
	if !has("waited") || !has("queued") {
		t.Fatal("the batch was not written with the waiting sender's item")
	}
}
