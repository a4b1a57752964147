package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The store in etcd (the appliances of a cluster). Every bucket is a range of keys under the store's
// prefix; a transaction reads at one revision and commits as one etcd Txn:
//
//	<prefix>d/<bucket>/<key>   a bucket's values (#buckets and #sequences are buckets too: the buckets
//	                           Open created, and each bucket's sequence)
//	<prefix>v/<bucket>         written by every transaction that writes the bucket: its mod revision
//	                           moves with every change of the bucket; its value names the keys the
//	                           transaction wrote (etcdChangedKeys), or is empty (too many, a range deleted)
//
// A read-write transaction is optimistic and serializable: its reads are at the revision of its first
// read; its writes are buffered (it reads them back, its cursors too) and sent at commit in one Txn whose
// compares prove nothing it read changed since that revision: each key it read by Get (its mod revision
// still the one read, 0 for a key absent: a key deleted since has mod revision 0 as well, which "not after
// the revision" would take for unchanged) and, for each bucket it walked with a cursor (or read many keys
// of), the bucket's version key (which every writer of the bucket writes: a key put into a range it
// walked is seen too). A commit whose compares fail is a conflict: the transaction's function runs again
// on a new revision, up to etcdAttempts times.
//
// Since the commit proves every read current, a read-write transaction's first read need not be: it is
// serializable (the local member answers from its own state, without the round to the leader a
// linearizable read takes, ReadIndex), unless it answers at a revision older than one this process has
// already committed or seen (etcdKV.seen: then it is read again linearizably, so that a process reads its
// own writes). A stale read makes the compares fail and the function runs again, with a linearizable first
// read (so it makes progress). A transaction that wrote nothing, or whose function failed (a record not
// found that another node has just made), still proves its reads before it returns: its compares are sent
// alone (a read-only Txn, linearizable), and when they fail it runs again too. A View's first read stays
// linearizable.
//
// The tables' versions (Table.Version) are revisions here: the mod revision of the table's version key,
// set from the commit's revision by the writer before Update returns, and from a watch of the version keys
// for the commits of other clients (other appliances of the cluster); Changes receives after each.

// etcdAttempts bounds how many times a conflicting read-write transaction is run.
const etcdAttempts = 32

// etcdManyReads: a transaction that read more keys than this of one bucket compares the bucket's version
// key instead of each key (an etcd Txn holds a bounded number of compares).
const etcdManyReads = 32

// etcdPage is how many keys a cursor reads from etcd at once, at first; each further read of the cursor
// reads twice as many, up to etcdMaxPage (a long walk takes few requests, a short one reads little).
const (
	etcdPage    = 64
	etcdMaxPage = 4096
)

// etcdTimeout bounds each request to etcd (a cluster without quorum fails a write after it, clearly).
const etcdTimeout = 15 * time.Second

// ErrUnavailable is wrapped by the error of a request etcd did not answer in time or refused for want of
// a leader: a cluster without quorum (fewer than a majority of its members reachable) fails reads and
// writes so, after etcdTimeout, rather than waiting on.
var ErrUnavailable = errors.New("the metadata store does not answer: the cluster has no quorum (fewer than a majority of its etcd members reachable) or its leader is being elected")

// unavailable wraps err with ErrUnavailable when it says etcd did not answer (a timeout, no leader).
func unavailable(err error) error {
	if err == nil || errors.Is(err, ErrUnavailable) {
		return err
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, rpctypes.ErrNoLeader), errors.Is(err, rpctypes.ErrLeaderChanged), errors.Is(err, rpctypes.ErrTimeout),
		errors.Is(err, rpctypes.ErrTimeoutDueToLeaderFail), errors.Is(err, rpctypes.ErrTimeoutDueToConnectionLost),
		status.Code(err) == codes.DeadlineExceeded, status.Code(err) == codes.Unavailable:
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return err
}

// ErrConflict is wrapped by Update's error when a transaction on etcd conflicted with others' commits
// every time it was run.
var ErrConflict = errors.New("the transaction conflicted with concurrent ones")

// Pseudo-buckets of the etcd layout (their names are not names of tables, which have no '#').
const (
	etcdBuckets   = "#buckets"
	etcdSequences = "#sequences"
)

// etcdKV is the store under a prefix of an etcd cluster.
type etcdKV struct {
	c      *clientv3.Client
	prefix string
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{} // closed when the watch ended
	tables map[string]int
	// seen is the highest revision this process committed, read linearizably or saw in the watch: a
	// serializable read answered at an older revision is stale (see update).
	seen atomic.Int64
	// values: what this process last knew of keys (see etcdValues), read by read-write transactions.
	values etcdValues
	// noCompares (set by tests only) commits without the compares that prove the reads current: the
	// negative check of the linearizability test, which must then find a lost update.
	noCompares bool
	// layout is the store's layout as this process opened it (metaLayout's value) and layoutRev the
	// revision that wrote it: every commit compares that revision (0 while the store opens: the opening
	// transaction checks and writes it). The layout is written only when it changes.
	layout    string
	layoutRev atomic.Int64
	// lagRev (set by tests only), when not 0: the serializable first reads of read-write transactions
	// answer at this revision, as a member that has applied no further would (a stale read).
	lagRev int64
}

var _ kv = (*etcdKV)(nil)

// OpenEtcd opens the store kept under prefix (e.g. "/appliance/meta/") of the etcd cluster c reaches,
// creating its buckets as Open does. The client stays the caller's (Close does not close it). What only a
// file has (the file's checks, the generation record, WriteSnapshot) is refused or absent (ErrNotFile).
func OpenEtcd(c *clientv3.Client, prefix string) (*DB, error) {
	if prefix == "" {
		return nil, errors.New("open metadata store on etcd: an empty key prefix")
	}
	ctx, cancel := context.WithCancel(context.Background())
	e := &etcdKV{c: c, prefix: prefix, ctx: ctx, cancel: cancel, done: make(chan struct{}), tables: map[string]int{}}
	for n, name := range registered {
		e.tables[string(name)] = n
	}
	db := newDB(e)
	db.etcd = e
	rctx, rcancel := context.WithTimeout(ctx, etcdTimeout)
	resp, err := c.Get(rctx, prefix+"v/", clientv3.WithPrefix())
	rcancel()
	if err != nil {
		cancel()
		return nil, fmt.Errorf("open metadata store on etcd (%s): %w", prefix, err)
	}
	for _, kv := range resp.Kvs {
		e.noteVersion(db, kv.Key, kv.ModRevision)
	}
	e.saw(resp.Header.Revision)
	go e.watch(db, resp.Header.Revision+1)
	if err := db.initialise(nil, nil); err != nil {
		db.Close()
		return nil, fmt.Errorf("initialise metadata store on etcd (%s): %w", prefix, err)
	}
	// The layout as opened: a later appliance may have written its own since this one's transaction.
	lctx, lcancel := context.WithTimeout(ctx, etcdTimeout)
	lresp, err := c.Get(lctx, prefix+"d/"+string(bucketMeta)+"/"+metaLayout)
	lcancel()
	switch {
	case err != nil:
		err = unavailable(err)
	case len(lresp.Kvs) == 0 || string(lresp.Kvs[0].Value) != layoutOf():
		err = fmt.Errorf("%w: its layout changed as this appliance opened it", ErrNewerLayout)
		if len(lresp.Kvs) > 0 {
			if lerr := checkLayout(string(lresp.Kvs[0].Value)); lerr != nil {
				err = lerr
			}
		}
	}
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("open metadata store on etcd (%s): %w", prefix, err)
	}
	e.layout = layoutOf()
	e.layoutRev.Store(lresp.Kvs[0].ModRevision)
	return db, nil
}

func (e *etcdKV) close() error {
	e.cancel()
	<-e.done
	return nil
}

// watch follows the version keys from rev on: a commit of anyone moves the versions of the tables it
// wrote and signals Changes. When the watch is cut (a compaction past it), every table's version moves
// to the current revision (caches start over) and it resumes from there.
func (e *etcdKV) watch(db *DB, rev int64) {
	defer close(e.done)
	for e.ctx.Err() == nil {
		wctx, wcancel := context.WithCancel(clientv3.WithRequireLeader(e.ctx))
		wc := e.c.Watch(wctx, e.prefix+"v/", clientv3.WithPrefix(), clientv3.WithRev(rev))
		for resp := range wc {
			if err := resp.Err(); err != nil {
				break
			}
			for _, ev := range resp.Events {
				e.saw(ev.Kv.ModRevision) // first: a table's version moved says seen did
				bucket := string(ev.Kv.Key[len(e.prefix)+len("v/"):])
				if keys, ok := etcdChangedKeys(ev.Kv.Value); ok {
					for _, k := range keys {
						e.values.changed(bucket, e.prefix+"d/"+bucket+"/"+k, ev.Kv.ModRevision)
					}
				} else {
					e.values.written(bucket, ev.Kv.ModRevision)
				}
				e.noteVersion(db, ev.Kv.Key, ev.Kv.ModRevision)
				rev = ev.Kv.ModRevision + 1
			}
			if len(resp.Events) > 0 {
				db.signal()
			}
		}
		wcancel()
		if e.ctx.Err() != nil {
			return
		}
		select { // the cluster may be unreachable: not in a tight loop
		case <-e.ctx.Done():
			return
		case <-time.After(100 * time.Millisecond):
		}
		ctx, cancel := context.WithTimeout(e.ctx, etcdTimeout)
		resp, err := e.c.Get(ctx, e.prefix+"v/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		cancel()
		if err != nil {
			continue
		}
		for n := range db.versions {
			storeMax(&db.versions[n], uint64(resp.Header.Revision))
		}
		e.values.reset()
		e.saw(resp.Header.Revision)
		db.signal()
		rev = resp.Header.Revision + 1
	}
}

// noteVersion moves the version of the table whose version key is key to rev (indexes and series have
// versions too; they are not read).
func (e *etcdKV) noteVersion(db *DB, key []byte, rev int64) {
	if n, ok := e.tables[string(key[len(e.prefix)+len("v/"):])]; ok {
		storeMax(&db.versions[n], uint64(rev))
	}
}

// saw notes that the cluster reached revision rev (this process committed it, or read or watched it).
func (e *etcdKV) saw(rev int64) {
	for {
		old := e.seen.Load()
		if old >= rev || e.seen.CompareAndSwap(old, rev) {
			return
		}
	}
}

func storeMax(v *atomic.Uint64, n uint64) {
	for {
		old := v.Load()
		if old >= n || v.CompareAndSwap(old, n) {
			return
		}
	}
}

func (e *etcdKV) view(db *DB, fn func(*Tx) error) error {
	t := &etcdTx{kv: e}
	err := fn(&Tx{kv: t, db: db})
	if t.err != nil {
		return t.err
	}
	return err
}

func (e *etcdKV) update(db *DB, fn func(*Tx) error) error {
	for attempt := 1; ; attempt++ {
		// The first attempt reads first from the local member (serializable); one run again after a
		// conflict (which may have been a stale read) reads linearizably, so that it makes progress.
		t := &etcdTx{kv: e, writable: true, serializable: attempt == 1}
		tx := &Tx{kv: t, db: db}
		err := fn(tx)
		if t.err != nil {
			err = t.err
		} else if err != nil && t.stale {
			// The function failed on what it read (a record not found, say, that another node has just
			// made): that is the answer only if the reads were current.
			if _, verr := t.validate(t.compares()); verr != nil {
				err = verr
			}
		}
		if err == nil {
			var rev int64
			if rev, err = t.commit(); err == nil {
				for _, n := range tx.wrote {
					storeMax(&db.versions[n], uint64(rev))
					tx.committed = append(tx.committed, uint64(rev))
				}
				db.signal()
				for _, f := range t.commits {
					f()
				}
				return nil
			}
		}
		if !errors.Is(err, errRetry) {
			return err
		}
		if attempt == etcdAttempts {
			return fmt.Errorf("store on etcd: %w (%d attempts)", ErrConflict, attempt)
		}
		// Let the others' transactions finish before this one reads again.
		time.Sleep(time.Duration(rand.IntN(1<<min(attempt, 8))) * time.Millisecond)
	}
}

// errRetry: the transaction's reads are no longer current (a compare failed, or its revision was
// compacted away): it runs again.
var errRetry = errors.New("retry")

// pending is a buffered write.
type pending struct {
	v   []byte
	del bool
}

// etcdTx is one transaction on etcd (one goroutine's, as bbolt's).
type etcdTx struct {
	kv       *etcdKV
	writable bool
	// serializable: the first read may be serializable (a read-write transaction's first attempt); stale
	// then says it was (its reads are proven current by the commit's compares only).
	serializable, stale bool
	rev                 int64 // the revision read at (0 until the first read)
	err                 error // the first failure: the transaction fails with it

	cache   map[string][]byte           // values read (full key → value; nil: absent)
	reads   map[string]map[string]int64 // bucket → the full keys read by Get → their mod revision (0: absent)
	known   map[string]map[string]int64 // bucket → those of the keys read from etcdKV.values (compared always)
	ranged  map[string]bool             // the buckets walked (or many of whose keys were read)
	writes  map[string]pending          // full key → buffered write
	written map[string]*keyList         // bucket → its keys written (for the cursors)
	spans   map[string][]span           // bucket → its ranges deleted (no key written since in them)
	commits []func()
}

func (t *etcdTx) fail(err error) {
	if t.err == nil {
		// A read that may succeed if the transaction runs again: its revision compacted away, or the leader
		// changed while the member confirmed its read index. An Update runs again; a View does not (its
		// function need not be safe to run twice: it may append to what it returns), and fails with the
		// error (ErrUnavailable for a leader change: a 503).
		if errors.Is(err, rpctypes.ErrCompacted) || errors.Is(err, rpctypes.ErrLeaderChanged) {
			err = fmt.Errorf("%w: %w", errRetry, err)
		}
		t.err = unavailable(err)
	}
}

func (t *etcdTx) dataKey(bucket string, key []byte) string {
	return t.kv.prefix + "d/" + bucket + "/" + string(key)
}

func (t *etcdTx) get(key string, opts ...clientv3.OpOption) *clientv3.GetResponse {
	if t.err != nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(t.kv.ctx, etcdTimeout)
	defer cancel()
	var resp *clientv3.GetResponse
	var err error
	if t.rev > 0 {
		opts = append(opts, clientv3.WithRev(t.rev))
		// The transaction's first read was linearizable and answered at t.rev, so the member that answered
		// has applied t.rev: a serializable read of that revision is the same snapshot, served by the member
		// without another round to the leader (ReadIndex). A member that has not applied it yet (another
		// endpoint of the client) says so, and the read goes linearizable.
		resp, err = t.kv.c.Get(ctx, key, append(opts, clientv3.WithSerializable())...)
		if errors.Is(err, rpctypes.ErrFutureRev) {
			resp, err = t.kv.c.Get(ctx, key, opts...)
		}
	} else if t.serializable {
		// The first read of a read-write transaction: the local member's state, unless that is older than
		// what this process has seen (then its own writes could be missing: read linearizably).
		sopts := append(opts, clientv3.WithSerializable())
		if t.kv.lagRev > 0 {
			sopts = append(sopts, clientv3.WithRev(t.kv.lagRev))
		}
		resp, err = t.kv.c.Get(ctx, key, sopts...)
		if err == nil && t.kv.lagRev > 0 {
			resp.Header.Revision = t.kv.lagRev
		}
		if err == nil && resp.Header.Revision < t.kv.seen.Load() {
			resp, err = t.kv.c.Get(ctx, key, opts...)
		} else if err == nil {
			t.stale = true
		}
	} else {
		resp, err = t.kv.c.Get(ctx, key, opts...)
	}
	if err != nil {
		t.fail(fmt.Errorf("read the metadata store on etcd: %w", unavailable(err)))
		return nil
	}
	if t.rev == 0 {
		t.rev = resp.Header.Revision
		if !t.stale {
			t.kv.saw(t.rev)
		}
	}
	return resp
}

func (t *etcdTx) bucket(name []byte) kvBucket { return etcdBucket{t: t, name: string(name)} }

func (t *etcdTx) createBucket(name []byte) (bool, error) {
	b := t.bucket([]byte(etcdBuckets))
	if b.Get(name) != nil {
		return false, t.err
	}
	return true, b.Put(name, []byte{})
}

func (t *etcdTx) onCommit(fn func()) { t.commits = append(t.commits, fn) }

func (t *etcdTx) generation() int {
	if t.rev == 0 {
		t.serializable = false // no compare proves a revision alone current: read it linearizably
		t.get(t.kv.prefix+"v/", clientv3.WithCountOnly())
	}
	return int(t.rev)
}

// commit sends the buffered writes in one Txn, if nothing read changed since t.rev, and returns its
// revision. A transaction that wrote nothing and whose first read was serializable sends its compares
// alone (a read-only Txn: linearizable), so that what it read is proven current as well.
func (t *etcdTx) commit() (int64, error) {
	readOnly := len(t.writes) == 0 && len(t.spans) == 0
	if readOnly && !t.stale {
		return t.rev, nil
	}
	cmps := t.compares()
	if readOnly {
		return t.validate(cmps)
	}
	ops := make([]clientv3.Op, 0, len(t.writes)+len(t.written))
	for k, w := range t.writes {
		if w.del {
			ops = append(ops, clientv3.OpDelete(k))
		} else {
			ops = append(ops, clientv3.OpPut(k, string(w.v)))
		}
	}
	for b, spans := range t.spans {
		for _, s := range spans {
			ops = append(ops, clientv3.OpDelete(t.dataKey(b, []byte(s.from)), clientv3.WithRange(t.dataKey(b, []byte(s.to)))))
		}
	}
	for b, l := range t.written {
		var keys []byte
		if len(t.spans[b]) == 0 && len(l.keys) <= etcdChangedMax {
			keys = etcdChangedValue(l.keys)
		}
		ops = append(ops, clientv3.OpPut(t.kv.prefix+"v/"+b, string(keys)))
	}
	// The layout this process opened is still the store's: a later appliance that upgraded it (another
	// node, started since) keeps buckets in step that this one does not know of.
	var elseOps []clientv3.Op
	layoutKey := t.dataKey(string(bucketMeta), []byte(metaLayout))
	layoutRev := t.kv.layoutRev.Load()
	if layoutRev != 0 {
		cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(layoutKey), "=", layoutRev))
		elseOps = append(elseOps, clientv3.OpGet(layoutKey))
	}
	ctx, cancel := context.WithTimeout(t.kv.ctx, etcdTimeout)
	defer cancel()
	resp, err := t.kv.c.Txn(ctx).If(cmps...).Then(ops...).Else(elseOps...).Commit()
	if err == nil && !resp.Succeeded && len(elseOps) > 0 {
		var now string
		var rev int64
		if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
			now, rev = string(kvs[0].Value), kvs[0].ModRevision
		}
		switch {
		case rev == layoutRev:
		case now == t.kv.layout: // written again as it was (a copy of the store put back): the same layout
			t.kv.layoutRev.CompareAndSwap(layoutRev, rev)
			return 0, errRetry
		case checkLayout(now) != nil:
			return 0, checkLayout(now)
		default:
			return 0, fmt.Errorf("%w: its layout changed since this appliance opened it", ErrNewerLayout)
		}
	}
	switch {
	case errors.Is(err, rpctypes.ErrRequestTooLarge), errors.Is(err, rpctypes.ErrTooManyOps):
		return 0, fmt.Errorf("commit to the metadata store on etcd: the transaction is too large for etcd (%d writes, %d compares; see etcdembed's limits): %w", len(ops), len(cmps), err)
	case err != nil:
		return 0, fmt.Errorf("commit to the metadata store on etcd (its outcome unknown): %w", unavailable(err))
	case !resp.Succeeded:
		return 0, errRetry
	}
	rev := resp.Header.Revision
	t.kv.saw(rev)
	for b := range t.spans {
		t.kv.values.written(b, rev)
	}
	for b, l := range t.written {
		for _, key := range l.keys {
			k := t.dataKey(b, []byte(key))
			if w := t.writes[k]; w.del {
				t.kv.values.put(b, k, etcdValue{at: rev})
			} else {
				t.kv.values.put(b, k, etcdValue{v: nonNil(w.v), mod: rev, at: rev})
			}
		}
	}
	return rev, nil
}

// compares are the conditions that prove the transaction's reads still current: each key read by Get
// (its mod revision), each bucket walked (its version key not written since the revision read at).
func (t *etcdTx) compares() []clientv3.Cmp {
	var cmps []clientv3.Cmp
	if t.kv.noCompares {
		return nil
	}
	for b := range t.ranged {
		cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(t.kv.prefix+"v/"+b), "<", t.rev+1))
	}
	for b, keys := range t.reads {
		if t.ranged[b] {
			keys = t.known[b] // known at another revision than t.rev: compared each
		}
		for k, mod := range keys {
			cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(k), "=", mod))
		}
	}
	return cmps
}

// validate proves the reads of a transaction that wrote nothing current (cmps: its compares) in a
// read-only Txn. Its one operation, a linearizable count, makes etcd answer it linearizably (after a
// ReadIndex round); a Txn without operations would be served from the member's own state, like a
// serializable read.
func (t *etcdTx) validate(cmps []clientv3.Cmp) (int64, error) {
	ctx, cancel := context.WithTimeout(t.kv.ctx, etcdTimeout)
	defer cancel()
	resp, err := t.kv.c.Txn(ctx).If(cmps...).Then(clientv3.OpGet(t.kv.prefix+"v/", clientv3.WithCountOnly())).Commit()
	switch {
	case err != nil:
		return 0, fmt.Errorf("read the metadata store on etcd: %w", unavailable(err))
	case !resp.Succeeded:
		return 0, errRetry
	}
	t.kv.saw(resp.Header.Revision)
	return t.rev, nil
}

// keyList is a bucket's keys written by a transaction, sorted when a cursor asks (writes in order, as
// most are, keep it sorted as they go).
type keyList struct {
	keys     []string
	unsorted bool
}

func (l *keyList) add(k string) {
	if n := len(l.keys); n > 0 && l.keys[n-1] >= k {
		l.unsorted = true
	}
	l.keys = append(l.keys, k)
}

func (l *keyList) sorted() []string {
	if l == nil {
		return nil
	}
	if l.unsorted {
		slices.Sort(l.keys)
		l.unsorted = false
	}
	return l.keys
}

// etcdBucket is a bucket of an etcd transaction.
type etcdBucket struct {
	t    *etcdTx
	name string
}

func (b etcdBucket) Get(key []byte) []byte {
	t := b.t
	k := t.dataKey(b.name, key)
	if w, ok := t.writes[k]; ok {
		if w.del {
			return nil
		}
		return nonNil(w.v)
	}
	if t.inSpan(b.name, key) {
		return nil
	}
	if v, ok := t.cache[k]; ok {
		return v
	}
	if t.serializable && !t.ranged[b.name] && len(t.reads[b.name]) < etcdManyReads {
		// A read-write transaction's first attempt: what this process knows of the key will do (the
		// commit proves it current).
		if known, ok := t.kv.values.get(b.name, k); ok {
			t.noteKnown(b.name, k, known.v, known.mod)
			return known.v
		}
	}
	resp := t.get(k)
	if resp == nil {
		return nil
	}
	var v []byte
	var mod int64
	if len(resp.Kvs) > 0 {
		v, mod = nonNil(resp.Kvs[0].Value), resp.Kvs[0].ModRevision
	}
	t.noteRead(b.name, k, v, mod)
	if t.writable { // what read-write transactions read (not every View's: a walk of many records)
		t.kv.values.put(b.name, k, etcdValue{v: v, mod: mod, at: t.rev})
	}
	return v
}

// noteKnown notes a read of k answered without etcd (v, mod: what the process knows of it): the commit
// must prove it current, even in a bucket walked.
func (t *etcdTx) noteKnown(bucket, k string, v []byte, mod int64) {
	t.stale = true
	t.noteRead(bucket, k, v, mod)
	if t.known == nil {
		t.known = map[string]map[string]int64{}
	}
	if t.known[bucket] == nil {
		t.known[bucket] = map[string]int64{}
	}
	t.known[bucket][k] = mod
}

// assumeAbsent: the first attempt of a read-write transaction takes the bucket's key as absent without
// reading it (a record with a new ID: Table.Insert); the commit's compare proves it (mod revision 0).
func (t *etcdTx) assumeAbsent(bucket []byte, key string) {
	b := string(bucket)
	if !t.serializable || t.ranged[b] || len(t.reads[b]) >= etcdManyReads {
		return
	}
	k := t.dataKey(b, []byte(key))
	if _, ok := t.writes[k]; ok {
		return
	}
	if _, ok := t.cache[k]; ok || t.inSpan(b, []byte(key)) {
		return
	}
	t.noteKnown(b, k, nil, 0)
}

// noteRead keeps the value read at k (nil: absent) and that the commit must prove it unchanged (its mod
// revision mod, 0 when absent).
func (t *etcdTx) noteRead(bucket, k string, v []byte, mod int64) {
	if t.cache == nil {
		t.cache, t.reads = map[string][]byte{}, map[string]map[string]int64{}
	}
	t.cache[k] = v
	keys := t.reads[bucket]
	if keys == nil {
		keys = map[string]int64{}
		t.reads[bucket] = keys
	}
	keys[k] = mod
	if len(keys) > etcdManyReads {
		t.walked(bucket)
	}
}

// etcdBatch bounds the reads prefetch sends in one request.
const etcdBatch = 1024

// prefetch reads the values of keys of bucket not read yet in one request (a few for many keys), so
// that the Gets that follow (the records an index walk found) are answered from the transaction.
func (t *etcdTx) prefetch(bucket []byte, keys []string) {
	if t.rev == 0 || t.err != nil {
		return
	}
	var todo []string
	for _, id := range keys {
		k := t.dataKey(string(bucket), []byte(id))
		if _, ok := t.writes[k]; ok {
			continue
		}
		if _, ok := t.cache[k]; ok || t.inSpan(string(bucket), []byte(id)) {
			continue
		}
		todo = append(todo, k)
	}
	for len(todo) > 0 {
		n := min(len(todo), etcdBatch)
		resp, err := t.readMany(todo[:n], true)
		if errors.Is(err, rpctypes.ErrFutureRev) {
			resp, err = t.readMany(todo[:n], false)
		}
		if err != nil {
			t.fail(fmt.Errorf("read the metadata store on etcd: %w", unavailable(err)))
			return
		}
		for i, r := range resp.Responses {
			var v []byte
			var mod int64
			if kvs := r.GetResponseRange().GetKvs(); len(kvs) > 0 {
				v, mod = nonNil(kvs[0].Value), kvs[0].ModRevision
			}
			t.noteRead(string(bucket), todo[i], v, mod)
		}
		todo = todo[n:]
	}
}

// readMany reads keys at the transaction's revision in one read-only Txn; serializable (each Get so):
// served by the member from its own state (see get).
func (t *etcdTx) readMany(keys []string, serializable bool) (*clientv3.TxnResponse, error) {
	ops := make([]clientv3.Op, len(keys))
	for i, k := range keys {
		opts := []clientv3.OpOption{clientv3.WithRev(t.rev)}
		if serializable {
			opts = append(opts, clientv3.WithSerializable())
		}
		ops[i] = clientv3.OpGet(k, opts...)
	}
	ctx, cancel := context.WithTimeout(t.kv.ctx, etcdTimeout)
	defer cancel()
	return t.kv.c.Txn(ctx).Then(ops...).Commit()
}

func nonNil(v []byte) []byte {
	if v == nil {
		return []byte{}
	}
	return v
}

func (t *etcdTx) walked(bucket string) {
	if t.ranged == nil {
		t.ranged = map[string]bool{}
	}
	t.ranged[bucket] = true
}

func (b etcdBucket) write(key []byte, w pending) error {
	t := b.t
	if !t.writable {
		return errors.New("write in a read-only transaction")
	}
	if t.err != nil {
		return t.err
	}
	if t.writes == nil {
		t.writes, t.written = map[string]pending{}, map[string]*keyList{}
	}
	k := t.dataKey(b.name, key)
	if !w.del {
		t.splitSpans(b.name, string(key))
	}
	if _, ok := t.writes[k]; !ok {
		l := t.written[b.name]
		if l == nil {
			l = &keyList{}
			t.written[b.name] = l
		}
		l.add(string(key))
	}
	t.writes[k] = w
	return nil
}

func (b etcdBucket) Put(key, value []byte) error {
	return b.write(key, pending{v: bytes.Clone(nonNil(value))})
}

func (b etcdBucket) Delete(key []byte) error { return b.write(key, pending{del: true}) }

// span is a range of a bucket's keys deleted: [from, to).
type span struct{ from, to string }

func (t *etcdTx) inSpan(bucket string, key []byte) bool {
	for _, s := range t.spans[bucket] {
		if string(key) >= s.from && string(key) < s.to {
			return true
		}
	}
	return false
}

// splitSpans takes key out of the bucket's deleted ranges (etcd refuses a Txn putting a key it deletes).
func (t *etcdTx) splitSpans(bucket, key string) {
	spans := t.spans[bucket]
	for i := 0; i < len(spans); i++ {
		s := spans[i]
		if key < s.from || key >= s.to {
			continue
		}
		spans = slices.Delete(spans, i, i+1)
		i--
		if s.from < key {
			spans = append(spans, span{s.from, key})
		}
		if after := key + "\x00"; after < s.to {
			spans = append(spans, span{after, s.to})
		}
	}
	if t.spans != nil {
		t.spans[bucket] = spans
	}
}

// deleteRange deletes the bucket's keys from <= key < to in one etcd operation (however many there are).
func (b etcdBucket) deleteRange(from, to []byte) error {
	t := b.t
	if !t.writable {
		return errors.New("write in a read-only transaction")
	}
	if t.err != nil {
		return t.err
	}
	if t.writes == nil {
		t.writes, t.written = map[string]pending{}, map[string]*keyList{}
	}
	l := t.written[b.name]
	if l == nil {
		l = &keyList{}
		t.written[b.name] = l
	}
	keys := l.sorted()
	i, _ := slices.BinarySearch(keys, string(from))
	j, _ := slices.BinarySearch(keys, string(to))
	for _, k := range keys[i:j] {
		delete(t.writes, t.dataKey(b.name, []byte(k)))
	}
	l.keys = slices.Delete(keys, i, j)
	if t.spans == nil {
		t.spans = map[string][]span{}
	}
	t.spans[b.name] = append(t.spans[b.name], span{string(from), string(to)})
	return nil
}

func (b etcdBucket) ForEach(fn func(k, v []byte) error) error {
	c := b.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		if err := fn(k, v); err != nil {
			return err
		}
	}
	return b.t.err
}

func (b etcdBucket) Cursor() cursor {
	return cursor{e: &etcdCursor{t: b.t, bucket: b.name, base: b.t.kv.prefix + "d/" + b.name + "/"}}
}

func (b etcdBucket) Sequence() uint64 {
	v := etcdBucket{t: b.t, name: etcdSequences}.Get([]byte(b.name))
	if len(v) == 0 {
		return 0
	}
	n, err := strconv.ParseUint(string(v), 10, 64)
	if err != nil {
		b.t.fail(fmt.Errorf("the sequence of %s holds %q: %w", b.name, v, err))
	}
	return n
}

func (b etcdBucket) NextSequence() (uint64, error) {
	n := b.Sequence() + 1
	if b.t.err != nil {
		return 0, b.t.err
	}
	return n, etcdBucket{t: b.t, name: etcdSequences}.Put([]byte(b.name), []byte(strconv.FormatUint(n, 10)))
}

func (b etcdBucket) SetSequence(n uint64) error {
	return etcdBucket{t: b.t, name: etcdSequences}.Put([]byte(b.name), []byte(strconv.FormatUint(n, 10)))
}

// etcdCursor walks a bucket as of the transaction's revision with the transaction's writes laid over it.
// It reads the bucket a page at a time: win holds every key of the revision in [lo, hi) (hi nil: to the
// bucket's end), in order.
type etcdCursor struct {
	t      *etcdTx
	bucket string
	base   string

	lo, hi   []byte
	win      []*mvccpb.KeyValue // keys relative to the bucket: kv.Key[len(base):]
	loaded   bool
	page     int64  // how many keys the next read asks for
	cur      []byte // where the cursor is (nil: nowhere)
	curValue []byte
}

func (c *etcdCursor) rel(kv *mvccpb.KeyValue) []byte { return kv.Key[len(c.base):] }

// fetch reads a page from the revision: ascending from from (inclusive), or descending below to.
func (c *etcdCursor) fetch(from, to []byte, descend bool) bool {
	c.t.walked(c.bucket)
	c.page = min(max(2*c.page, etcdPage), etcdMaxPage)
	var resp *clientv3.GetResponse
	end := clientv3.GetPrefixRangeEnd(c.base)
	if descend {
		if to != nil {
			end = c.base + string(to)
		}
		resp = c.t.get(c.base, clientv3.WithRange(end), clientv3.WithLimit(c.page),
			clientv3.WithSort(clientv3.SortByKey, clientv3.SortDescend))
	} else {
		resp = c.t.get(c.base+string(from), clientv3.WithRange(end), clientv3.WithLimit(c.page),
			clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend))
	}
	if resp == nil {
		return false
	}
	kvs := resp.Kvs
	if descend {
		slices.Reverse(kvs)
		c.hi, c.lo = to, []byte{}
		if resp.More && len(kvs) > 0 {
			c.lo = c.rel(kvs[0])
		}
	} else {
		c.lo, c.hi = from, nil
		if resp.More && len(kvs) > 0 {
			c.hi = append(bytes.Clone(c.rel(kvs[len(kvs)-1])), 0)
		}
	}
	c.win, c.loaded = kvs, true
	return true
}

// snapFirstGE is the revision's first key >= k.
func (c *etcdCursor) snapFirstGE(k []byte) ([]byte, []byte) {
	for range 1 << 20 {
		if !c.loaded || bytes.Compare(k, c.lo) < 0 || c.hi != nil && bytes.Compare(k, c.hi) >= 0 {
			if !c.fetch(k, nil, false) {
				return nil, nil
			}
		}
		i, _ := slices.BinarySearchFunc(c.win, k, func(kv *mvccpb.KeyValue, k []byte) int { return bytes.Compare(c.rel(kv), k) })
		if i < len(c.win) {
			return c.rel(c.win[i]), c.win[i].Value
		}
		if c.hi == nil {
			return nil, nil
		}
		k = c.hi
	}
	return nil, nil
}

// snapLastLT is the revision's last key < k (k nil: the last key).
func (c *etcdCursor) snapLastLT(k []byte) ([]byte, []byte) {
	for range 1 << 20 {
		valid := c.loaded && (k == nil && c.hi == nil ||
			k != nil && (c.hi == nil || bytes.Compare(k, c.hi) <= 0) && (len(c.lo) == 0 || bytes.Compare(k, c.lo) > 0))
		if !valid {
			if !c.fetch(nil, k, true) {
				return nil, nil
			}
		}
		i := len(c.win)
		if k != nil {
			i, _ = slices.BinarySearchFunc(c.win, k, func(kv *mvccpb.KeyValue, k []byte) int { return bytes.Compare(c.rel(kv), k) })
		}
		if i > 0 {
			return c.rel(c.win[i-1]), c.win[i-1].Value
		}
		if len(c.lo) == 0 {
			return nil, nil
		}
		k = c.lo
	}
	return nil, nil
}

// firstGE is the first key >= k of the revision with the transaction's writes.
func (c *etcdCursor) firstGE(k []byte) ([]byte, []byte) {
	sk, sv := c.snapFirstGE(k)
	for sk != nil && c.deleted(sk) {
		sk, sv = c.snapFirstGE(append(bytes.Clone(sk), 0))
	}
	keys := c.t.written[c.bucket].sorted()
	i, _ := slices.BinarySearch(keys, string(k))
	for ; i < len(keys); i++ {
		if !c.deleted([]byte(keys[i])) {
			break
		}
	}
	if i < len(keys) && (sk == nil || keys[i] <= string(sk)) {
		return c.at([]byte(keys[i]), c.t.writes[c.t.dataKey(c.bucket, []byte(keys[i]))].v)
	}
	return c.at(sk, sv)
}

// lastLT is the last key < k (k nil: the last key) of the revision with the transaction's writes.
func (c *etcdCursor) lastLT(k []byte) ([]byte, []byte) {
	sk, sv := c.snapLastLT(k)
	for sk != nil && c.deleted(sk) {
		sk, sv = c.snapLastLT(bytes.Clone(sk))
	}
	keys := c.t.written[c.bucket].sorted()
	i := len(keys)
	if k != nil {
		i, _ = slices.BinarySearch(keys, string(k))
	}
	for i--; i >= 0; i-- {
		if !c.deleted([]byte(keys[i])) {
			break
		}
	}
	if i >= 0 && (sk == nil || keys[i] >= string(sk)) {
		return c.at([]byte(keys[i]), c.t.writes[c.t.dataKey(c.bucket, []byte(keys[i]))].v)
	}
	return c.at(sk, sv)
}

func (c *etcdCursor) deleted(k []byte) bool {
	w, ok := c.t.writes[c.t.dataKey(c.bucket, k)]
	return ok && w.del || !ok && c.t.inSpan(c.bucket, k)
}

func (c *etcdCursor) at(k, v []byte) ([]byte, []byte) {
	if k == nil {
		c.cur, c.curValue = nil, nil
		return nil, nil
	}
	c.cur, c.curValue = k, nonNil(v)
	return k, c.curValue
}

func (c *etcdCursor) first() ([]byte, []byte)        { return c.firstGE([]byte{}) }
func (c *etcdCursor) last() ([]byte, []byte)         { return c.lastLT(nil) }
func (c *etcdCursor) seek(k []byte) ([]byte, []byte) { return c.firstGE(bytes.Clone(k)) }
func (c *etcdCursor) next() ([]byte, []byte) {
	if c.cur == nil {
		return nil, nil
	}
	return c.firstGE(append(bytes.Clone(c.cur), 0))
}

func (c *etcdCursor) prev() ([]byte, []byte) {
	if c.cur == nil {
		return nil, nil
	}
	return c.lastLT(bytes.Clone(c.cur))
}

func (c *etcdCursor) delete() error {
	if c.cur == nil {
		return errors.New("delete at no key")
	}
	return etcdBucket{t: c.t, name: c.bucket}.Delete(c.cur)
}
