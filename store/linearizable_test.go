package store

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/theappliance/appliance/store/etcdembed"
)

// The store on a three-member etcd cluster is linearizable: clients, each with its own store over its own
// etcd client of a different member, run reads, writes and read-modify-write transactions through the
// store's API on a few meta values while members are stopped and restarted; porcupine then finds an
// order of the operations, each taking effect at one instant between its call and its return, that a
// single copy of the values explains (the check etcd's own robustness tests make).
//
// An operation that failed is modelled by what its failure says: a read changed nothing (it is left
// out); an Update failing with ErrConflict did not commit (the store promises it: left out, so an effect
// of it would be found); any other failed Update (a timeout, a member stopping under its commit) has an
// unknown outcome: it is recorded as returning at the end of the history with its result unknown, so
// that it may take effect at any instant after its call, including never (placed last, nothing sees it).

// linKeys is how many meta values the operations share.
const linKeys = 3

// linState is the model's state: the values (absent counts as 0).
type linState [linKeys]int64

type linKind int

const (
	linRead    linKind = iota // View: one value
	linReadAll                // View: every value (one consistent state)
	linWrite                  // Update: put a value
	linIncr                   // Update: read a value, put it plus one; returns the new value
	linMove                   // Update: one off key, one onto key2 (two values in one transaction)
	linDelete                 // Update: delete a value (the bucket's Delete, which the tables' Delete is)
)

type linInput struct {
	kind       linKind
	key, key2  int
	value      int64 // what linWrite puts
	unknownOut bool  // the outcome is unknown (the operation failed)
}

type linOutput struct {
	value int64    // linRead's, linIncr's new value
	all   linState // linReadAll's
}

var linModel = porcupine.Model{
	Init: func() any { return linState{} },
	Hash: func(state any) uint64 {
		var h uint64
		for _, v := range state.(linState) {
			h = h*1_000_003 + uint64(v)
		}
		return h
	},
	Step: func(state, input, output any) (bool, any) {
		s, in, out := state.(linState), input.(linInput), output.(linOutput)
		switch in.kind {
		case linRead:
			return in.unknownOut || out.value == s[in.key], s
		case linReadAll:
			return in.unknownOut || out.all == s, s
		case linWrite:
			s[in.key] = in.value
			return true, s
		case linIncr:
			s[in.key]++
			return in.unknownOut || out.value == s[in.key], s
		case linMove:
			s[in.key]--
			s[in.key2]++
			return true, s
		case linDelete:
			s[in.key] = 0
			return true, s
		}
		panic(fmt.Sprintf("no operation %d", in.kind))
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(linInput), output.(linOutput)
		res := ""
		switch in.kind {
		case linRead:
			res = fmt.Sprintf("read(%d) -> %d", in.key, out.value)
		case linReadAll:
			res = fmt.Sprintf("readAll -> %v", out.all)
		case linWrite:
			res = fmt.Sprintf("write(%d, %d)", in.key, in.value)
		case linIncr:
			res = fmt.Sprintf("incr(%d) -> %d", in.key, out.value)
		case linMove:
			res = fmt.Sprintf("move(%d -> %d)", in.key, in.key2)
		case linDelete:
			res = fmt.Sprintf("delete(%d)", in.key)
		}
		if in.unknownOut {
			res += " (failed: outcome unknown)"
		}
		return res
	},
}

func linMetaKey(k int) string { return "linearizable/" + strconv.Itoa(k) }

func linGet(t *testing.T, tx *Tx, k int) int64 {
	v := tx.Meta(linMetaKey(k))
	if v == "" {
		return 0
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		t.Errorf("meta %s holds %q: %v", linMetaKey(k), v, err)
	}
	return n
}

func linPut(tx *Tx, k int, n int64) error {
	return tx.SetMeta(linMetaKey(k), strconv.FormatInt(n, 10))
}

// linRun runs one operation on db and says what it returned.
func linRun(t *testing.T, db *DB, in linInput) (linOutput, error) {
	var out linOutput
	switch in.kind {
	case linRead:
		return out, db.View(func(tx *Tx) error {
			out.value = linGet(t, tx, in.key)
			return nil
		})
	case linReadAll:
		return out, db.View(func(tx *Tx) error {
			for k := range linKeys {
				out.all[k] = linGet(t, tx, k)
			}
			return nil
		})
	case linWrite:
		return out, db.Update(func(tx *Tx) error { return linPut(tx, in.key, in.value) })
	case linIncr:
		return out, db.Update(func(tx *Tx) error {
			out.value = linGet(t, tx, in.key) + 1
			return linPut(tx, in.key, out.value)
		})
	case linMove:
		return out, db.Update(func(tx *Tx) error {
			if err := linPut(tx, in.key, linGet(t, tx, in.key)-1); err != nil {
				return err
			}
			return linPut(tx, in.key2, linGet(t, tx, in.key2)+1)
		})
	case linDelete:
		return out, db.Update(func(tx *Tx) error { return tx.kv.bucket(bucketMeta).Delete([]byte(linMetaKey(in.key))) })
	}
	panic(fmt.Sprintf("no operation %d", in.kind))
}

// linHistory records operations with their call and return times (nanoseconds since it began).
type linHistory struct {
	start time.Time
	mu    sync.Mutex
	ops   []porcupine.Operation
	// unknown are the indexes in ops of the operations whose outcome is unknown (returned at the end).
	unknown []int
	done    atomic.Int64   // operations finished (with an outcome or not)
	each    []atomic.Int64 // the same by client
	tick    chan struct{}
}

func newLinHistory(clients int) *linHistory {
	return &linHistory{start: time.Now(), each: make([]atomic.Int64, clients), tick: make(chan struct{}, 1)}
}

func (h *linHistory) now() int64 { return time.Since(h.start).Nanoseconds() }

// do runs in on db as client and records it.
func (h *linHistory) do(t *testing.T, client int, db *DB, in linInput) {
	call := h.now()
	out, err := linRun(t, db, in)
	ret := h.now()
	h.mu.Lock()
	switch {
	case err == nil:
		h.ops = append(h.ops, porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret})
	case in.kind == linRead || in.kind == linReadAll, errors.Is(err, ErrConflict):
		// changed nothing: left out
	default:
		in.unknownOut = true
		h.unknown = append(h.unknown, len(h.ops))
		h.ops = append(h.ops, porcupine.Operation{ClientId: client, Input: in, Call: call, Output: linOutput{}})
	}
	h.mu.Unlock()
	h.each[client].Add(1)
	h.done.Add(1)
	select {
	case h.tick <- struct{}{}:
	default:
	}
}

// waitOps waits until n more operations than at the call finished.
func (h *linHistory) waitOps(ctx context.Context, t *testing.T, n int64) {
	t.Helper()
	target := h.done.Load() + n
	for h.done.Load() < target {
		select {
		case <-h.tick:
		case <-ctx.Done():
			t.Fatalf("%d operations finished, waiting for %d: %v", h.done.Load(), target, ctx.Err())
		}
	}
}

// waitEach waits until each of the clients finished n more operations than at the call (a member
// restarted serves its clients again).
func (h *linHistory) waitEach(ctx context.Context, t *testing.T, clients []int, n int64) {
	t.Helper()
	began := time.Now()
	targets := make([]int64, len(clients))
	for i, c := range clients {
		targets[i] = h.each[c].Load() + n
	}
	for i, c := range clients {
		for h.each[c].Load() < targets[i] {
			select {
			case <-h.tick:
			case <-ctx.Done():
				t.Fatalf("client %d finished %d operations, waiting for %d: %v", c, h.each[c].Load(), targets[i], ctx.Err())
			}
		}
	}
	t.Logf("clients %v finished %d operations more in %v", clients, n, time.Since(began))
}

// history is the operations, those whose outcome is unknown returning after every other.
func (h *linHistory) history() []porcupine.Operation {
	h.mu.Lock()
	defer h.mu.Unlock()
	end := h.now() + 1
	for _, i := range h.unknown {
		h.ops[i].Return = end
	}
	return h.ops
}

// check asserts porcupine's verdict on the history, writing a visualisation of it when it differs.
func linCheck(t *testing.T, ops []porcupine.Operation, want porcupine.CheckResult) {
	t.Helper()
	res, info := porcupine.CheckOperationsVerbose(linModel, ops, time.Minute)
	if res == want {
		return
	}
	path := filepath.Join(t.TempDir(), "history.html")
	if err := porcupine.VisualizePath(linModel, info, path); err != nil {
		t.Logf("visualise the history: %v", err)
	}
	t.Fatalf("porcupine says %s of %d operations, want %s (the history: %s)", res, len(ops), want, path)
}

// linCluster starts a three-member cluster, stopped when the test ends.
func linCluster(t *testing.T) *etcdembed.Cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dirs := make([]string, 3)
	for i := range dirs {
		dirs[i] = t.TempDir()
	}
	c, err := etcdembed.StartCluster(ctx, etcdembed.ClusterConfig{Dirs: dirs, LogLevel: "fatal"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// linStore opens the store under prefix over a client of member i alone (both closed when the test ends).
func linStore(t *testing.T, c *etcdembed.Cluster, i int, prefix string) *DB {
	t.Helper()
	cl, err := c.MemberClient(i)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	db, err := OpenEtcd(cl, prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func TestLinearizableAcrossMemberRestarts(t *testing.T) {
	c := linCluster(t)
	const workers = 6 // two a member
	dbs := make([]*DB, workers)
	for w := range dbs {
		dbs[w] = linStore(t, c, w%c.Size(), "/linearizable/")
	}
	h := newLinHistory(workers)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w, db := range dbs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rnd := rand.New(rand.NewPCG(uint64(w), 35))
			for seq := int64(1); ; seq++ {
				select {
				case <-stop:
					return
				default:
				}
				in := linInput{key: rnd.IntN(linKeys)}
				switch p := rnd.IntN(100); {
				case p < 30:
					in.kind = linRead
				case p < 40:
					in.kind = linReadAll
				case p < 55:
					in.kind, in.value = linWrite, int64(w+1)*1_000_000+seq
				case p < 85:
					in.kind = linIncr
				case p < 90:
					in.kind = linDelete
				default:
					in.kind, in.key2 = linMove, (in.key+1+rnd.IntN(linKeys-1))%linKeys
				}
				h.do(t, w, db, in)
			}
		}()
	}
	finished := false
	defer func() {
		if !finished { // a failure below: let the workers end before the stores close
			close(stop)
			wg.Wait()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	restart := func(i int) {
		t.Helper()
		t.Logf("stop member %d of %d (leader: %d) after %d operations", i+1, c.Size(), c.Leader()+1, h.done.Load())
		began := time.Now()
		c.Stop(i)
		t.Logf("member %d stopped in %v after %d operations", i+1, time.Since(began), h.done.Load())
		h.waitOps(ctx, t, 40) // the others' go on
		began = time.Now()
		if err := c.Restart(ctx, i); err != nil {
			t.Fatal(err)
		}
		t.Logf("member %d restarted in %v after %d operations", i+1, time.Since(began), h.done.Load())
		var clients []int // the member's
		for w := i; w < workers; w += c.Size() {
			clients = append(clients, w)
		}
		h.waitEach(ctx, t, clients, 10) // its clients' operations are served again
	}
	h.waitOps(ctx, t, 100)
	lead := c.Leader()
	if lead < 0 {
		t.Fatal("no member knows a leader")
	}
	restart((lead + 1) % c.Size()) // a follower
	h.waitOps(ctx, t, 100)
	lead = c.Leader()
	if lead < 0 {
		t.Fatal("no member knows a leader")
	}
	restart(lead) // the leader: an election while the clients work
	h.waitOps(ctx, t, 100)
	close(stop)
	wg.Wait()
	finished = true

	ops := h.history()
	counts := map[linKind]int{}
	for _, op := range ops {
		counts[op.Input.(linInput).kind]++
	}
	t.Logf("%d operations (%d reads, %d reads of all, %d writes, %d increments, %d moves, %d deletes), %d with an unknown outcome",
		len(ops), counts[linRead], counts[linReadAll], counts[linWrite], counts[linIncr], counts[linMove], counts[linDelete], len(h.unknown))
	if counts[linIncr] == 0 || counts[linRead] == 0 || counts[linMove] == 0 || counts[linDelete] == 0 {
		t.Fatal("the history lacks a kind of operation")
	}
	began := time.Now()
	linCheck(t, ops, porcupine.Ok)
	t.Logf("checked in %v", time.Since(began))
}

// The check can fail: histories that are not linearizable are found so.
func TestLinearizableCheckerRejects(t *testing.T) {
	op := func(client int, in linInput, out linOutput, call, ret int64) porcupine.Operation {
		return porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret}
	}
	// A read returns the old value after a write completed.
	stale := []porcupine.Operation{
		op(0, linInput{kind: linWrite, key: 0, value: 5}, linOutput{}, 0, 10),
		op(1, linInput{kind: linRead, key: 0}, linOutput{value: 0}, 20, 30),
	}
	linCheck(t, stale, porcupine.Illegal)
	// A lost update: two increments both return 1.
	lost := []porcupine.Operation{
		op(0, linInput{kind: linIncr, key: 1}, linOutput{value: 1}, 0, 10),
		op(1, linInput{kind: linIncr, key: 1}, linOutput{value: 1}, 5, 15),
	}
	linCheck(t, lost, porcupine.Illegal)
	// A read of all values sees half of a move.
	torn := []porcupine.Operation{
		op(0, linInput{kind: linMove, key: 0, key2: 1}, linOutput{}, 0, 10),
		op(1, linInput{kind: linReadAll}, linOutput{all: linState{-1, 0, 0}}, 5, 15),
	}
	linCheck(t, torn, porcupine.Illegal)
	// A write whose outcome is unknown may have taken effect, or not: reads may see either...
	unknown := []porcupine.Operation{
		op(0, linInput{kind: linWrite, key: 2, value: 7, unknownOut: true}, linOutput{}, 0, 100),
		op(1, linInput{kind: linRead, key: 2}, linOutput{value: 0}, 10, 20),
		op(1, linInput{kind: linRead, key: 2}, linOutput{value: 7}, 30, 40),
	}
	linCheck(t, unknown, porcupine.Ok)
	// ...but once seen, it stays.
	unknown = append(unknown, op(1, linInput{kind: linRead, key: 2}, linOutput{value: 0}, 50, 60))
	linCheck(t, unknown, porcupine.Illegal)
}

// On the store without its commit's compares, two increments on two members that both read before
// either commits lose one (the history is found not linearizable); with them, the second runs again.
func TestLinearizableNeedsCompares(t *testing.T) {
	c := linCluster(t)
	for _, noCompares := range []bool{false, true} {
		t.Run(fmt.Sprintf("noCompares=%v", noCompares), func(t *testing.T) {
			prefix := fmt.Sprintf("/linearizable-compares-%v/", noCompares)
			a, b := linStore(t, c, 0, prefix), linStore(t, c, 1, prefix)
			a.etcd.noCompares, b.etcd.noCompares = noCompares, noCompares
			h := newLinHistory(2)
			var bothRead sync.WaitGroup
			bothRead.Add(2)
			var wg sync.WaitGroup
			runs := make([]int, 2)
			for i, db := range []*DB{a, b} {
				wg.Add(1)
				go func() {
					defer wg.Done()
					call := h.now()
					var value int64
					err := db.Update(func(tx *Tx) error {
						runs[i]++
						value = linGet(t, tx, 0) + 1
						if runs[i] == 1 { // the first run reads before the other commits
							bothRead.Done()
							bothRead.Wait()
						}
						return linPut(tx, 0, value)
					})
					if err != nil {
						t.Error(err)
						return
					}
					h.mu.Lock()
					h.ops = append(h.ops, porcupine.Operation{ClientId: i, Input: linInput{kind: linIncr}, Call: call, Output: linOutput{value: value}, Return: h.now()})
					h.mu.Unlock()
				}()
			}
			wg.Wait()
			var final int64
			if err := a.View(func(tx *Tx) error { final = linGet(t, tx, 0); return nil }); err != nil {
				t.Fatal(err)
			}
			t.Logf("runs of the transactions %v, the value after both %d", runs, final)
			if noCompares {
				if final != 1 {
					t.Fatalf("without compares the value is %d, want the lost update's 1", final)
				}
				linCheck(t, h.history(), porcupine.Illegal)
				return
			}
			if final != 2 || runs[0]+runs[1] != 3 {
				t.Fatalf("with compares the value is %d after %v runs, want 2 after one run again", final, runs)
			}
			linCheck(t, h.history(), porcupine.Ok)
		})
	}
}

// A record deleted while another transaction, on another member, has read it and is about to write it
// stays deleted: the writer's commit finds that what it read is gone and runs again (and finds the record
// no more). Deletion leaves no mod revision to compare with; the commit must prove the record still there.
func TestLinearizableDeleteNotLost(t *testing.T) {
	c := linCluster(t)
	a, b := linStore(t, c, 0, "/linearizable-delete/"), linStore(t, c, 1, "/linearizable-delete/")
	rec := &ScheduledBackup{ID: "sb1", ProjectID: "p1", CronHour: 1}
	if err := a.Update(func(tx *Tx) error { return ScheduledBackups.Put(tx, rec) }); err != nil {
		t.Fatal(err)
	}
	read, deleted := make(chan struct{}), make(chan struct{})
	runs := 0
	errc := make(chan error, 1)
	go func() {
		errc <- a.Update(func(tx *Tx) error {
			runs++
			r, err := ScheduledBackups.Get(tx, "p1")
			if err != nil {
				return err
			}
			if runs == 1 { // the first run read the record before the other deletes it
				close(read)
				<-deleted
			}
			r.CronHour++
			return ScheduledBackups.Put(tx, r)
		})
	}()
	<-read
	if err := b.Update(func(tx *Tx) error { return ScheduledBackups.Delete(tx, "p1") }); err != nil {
		t.Fatal(err)
	}
	close(deleted)
	if err := <-errc; !errors.Is(err, ErrNotFound) {
		t.Errorf("the update of the deleted record returned %v after %d runs, want not found", err, runs)
	}
	for _, db := range []*DB{a, b} {
		if err := db.View(func(tx *Tx) error {
			r, err := ScheduledBackups.Get(tx, "p1")
			if !errors.Is(err, ErrNotFound) {
				t.Errorf("the deleted record reads %+v, %v: want not found", r, err)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
}

// An Update reads first from its own member (serializable), which may lag behind a write committed through
// another member: the commit's compares find the read stale and the function runs again, on the write;
// an Update that writes nothing proves its reads current at the end and runs again as well; and a first
// read older than what the process has seen (its own commits, its watch) is read again linearizably.
// The lagging member is lagRev: its serializable first reads answer at the revision before the write
// (as a member that has not applied it yet does), and the process's watch, on that member, has not
// brought the write either (seen is set back to that revision).
func TestLinearizableStaleFirstRead(t *testing.T) {
	c := linCluster(t)
	a, b := linStore(t, c, 0, "/linearizable-stale/"), linStore(t, c, 1, "/linearizable-stale/")
	// a's writes write a table too, whose version on b says when b's watch brought them.
	write := func(k int, v int64) {
		t.Helper()
		if err := a.Update(func(tx *Tx) error {
			if err := ScheduledBackups.Put(tx, &ScheduledBackup{ID: "sb", ProjectID: "p", CronHour: int(v % 24)}); err != nil {
				return err
			}
			return linPut(tx, k, v)
		}); err != nil {
			t.Fatal(err)
		}
	}
	write(0, 1)
	var before int64
	if err := a.View(func(tx *Tx) error { before = int64(tx.Generation()); return nil }); err != nil {
		t.Fatal(err)
	}
	write(0, 10) // through member 0
	// caughtUp waits for b's watch to bring a's last commit.
	caughtUp := func() {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for want := ScheduledBackups.Version(a); ScheduledBackups.Version(b) < want; {
			select {
			case <-b.Changes():
			case <-ctx.Done():
				t.Fatalf("b's watch never brought revision %d", want)
			}
		}
	}
	lag := func() {
		caughtUp() // first: it would move seen on after the lag is set
		b.etcd.lagRev = before
		b.etcd.seen.Store(before)
	}

	t.Run("write", func(t *testing.T) {
		lag()
		var reads []int64
		if err := b.Update(func(tx *Tx) error {
			v := linGet(t, tx, 0)
			reads = append(reads, v)
			return linPut(tx, 0, v+1)
		}); err != nil {
			t.Fatal(err)
		}
		if len(reads) != 2 || reads[0] != 1 || reads[1] != 10 {
			t.Fatalf("the update read %v, want [1 10]: the stale read of 1 then, run again, the write's 10", reads)
		}
		var got int64
		if err := a.View(func(tx *Tx) error { got = linGet(t, tx, 0); return nil }); err != nil {
			t.Fatal(err)
		}
		if got != 11 {
			t.Fatalf("the value after the update on the lagging member is %d, want 11 (10 + 1: the write through member 0 not lost)", got)
		}
	})

	t.Run("read only", func(t *testing.T) {
		write(0, 20)
		lag()
		var reads []int64
		if err := b.Update(func(tx *Tx) error { reads = append(reads, linGet(t, tx, 0)); return nil }); err != nil {
			t.Fatal(err)
		}
		if len(reads) != 2 || reads[1] != 20 {
			t.Fatalf("the update that writes nothing read %v, want the stale value then 20 (run again, not stale data returned as current)", reads)
		}
	})

	t.Run("failure", func(t *testing.T) {
		write(1, 5) // key 1 is absent at the lagging member's revision
		lag()
		var reads []int64
		err := b.Update(func(tx *Tx) error {
			v := linGet(t, tx, 1)
			reads = append(reads, v)
			if v == 0 {
				return ErrNotFound
			}
			return nil
		})
		if err != nil || len(reads) != 2 || reads[1] != 5 {
			t.Fatalf("the update read %v and returned %v, want 0 then 5 and no error: a failure on a stale read is not the answer", reads, err)
		}
	})

	t.Run("known", func(t *testing.T) {
		// What the process knows of a key (etcdKV.values) is read as a lagging member is: a value the watch
		// has not dropped yet when another member's commit changed it is caught by the compares too.
		b.etcd.lagRev = 0
		write(2, 1)
		var first int64
		if err := b.Update(func(tx *Tx) error { first = linGet(t, tx, 2); return nil }); err != nil { // an Update's reads are kept
			t.Fatal(err)
		}
		k := b.etcd.prefix + "d/" + string(bucketMeta) + "/" + linMetaKey(2)
		old, ok := b.etcd.values.get(string(bucketMeta), k)
		if !ok || first != 1 || string(old.v) != "1" {
			t.Fatalf("after a read of 1 (read %d) the process knows %q (%v)", first, old.v, ok)
		}
		// dropped waits for b's watch to drop what the process knew of the key (a's write changed it): the
		// watch then cannot undo stale() below.
		dropped := func() {
			t.Helper()
			for deadline := time.Now().Add(time.Minute); ; time.Sleep(5 * time.Millisecond) {
				if _, ok := b.etcd.values.get(string(bucketMeta), k); !ok {
					return
				}
				if time.Now().After(deadline) {
					t.Fatal("b's watch never dropped the key a's write changed")
				}
			}
		}
		write(2, 7)
		dropped()
		stale := func() { // as if b's watch had not brought the write yet
			b.etcd.values.reset()
			b.etcd.values.put(string(bucketMeta), k, old)
		}
		stale()
		var reads []int64
		if err := b.Update(func(tx *Tx) error {
			v := linGet(t, tx, 2)
			reads = append(reads, v)
			return linPut(tx, 2, v+1)
		}); err != nil {
			t.Fatal(err)
		}
		if len(reads) != 2 || reads[0] != 1 || reads[1] != 7 {
			t.Fatalf("the update read %v, want [1 7]: the stale value known, then, run again, the write's 7", reads)
		}
		write(2, 30)
		dropped()
		stale()
		reads = nil
		if err := b.Update(func(tx *Tx) error { reads = append(reads, linGet(t, tx, 2)); return nil }); err != nil {
			t.Fatal(err)
		}
		if len(reads) != 2 || reads[1] != 30 {
			t.Fatalf("the update that writes nothing read %v, want the stale 1 then 30", reads)
		}
		runs := 0
		if err := b.Update(func(tx *Tx) error { runs++; return linPut(tx, 2, linGet(t, tx, 2)+1) }); err != nil {
			t.Fatal(err)
		}
		var got int64
		if err := a.View(func(tx *Tx) error { got = linGet(t, tx, 2); return nil }); err != nil {
			t.Fatal(err)
		}
		if runs != 1 || got != 31 {
			t.Fatalf("an update of a value known current ran %d times and left %d, want once and 31", runs, got)
		}
	})

	t.Run("seen", func(t *testing.T) {
		lag()
		var cur int64
		if err := b.View(func(tx *Tx) error { cur = int64(tx.Generation()); return nil }); err != nil { // linearizable: seen moves on
			t.Fatal(err)
		}
		if got := b.etcd.seen.Load(); got != cur {
			t.Fatalf("after a linearizable read at revision %d the process has seen %d", cur, got)
		}
		runs := 0
		var v int64
		if err := b.Update(func(tx *Tx) error { runs++; v = linGet(t, tx, 0); return nil }); err != nil {
			t.Fatal(err)
		}
		if runs != 1 || v != 20 {
			t.Fatalf("the update ran %d times and read %d, want once and 20: a first read older than what the process saw is read again linearizably", runs, v)
		}
	})
}
