package store

import bolt "go.etcd.io/bbolt"

// The raw key-value layer under the tables, series and meta values: named buckets of sorted keys, read and
// written in transactions. Two backends implement it: one bbolt file (boltKV, bbolt.go: single-node, the
// default) and a prefix of an etcd cluster (etcdKV, etcd.go: the appliances of a cluster). What only a file
// has (its header and page checks, the generation record beside it, a copy of the file) stays on bbolt.

// kv is a backend: it runs the store's transactions. DB calls each backend's view and update directly,
// not through the interface, so that the caller's fn does not escape (a closure's variables stay on its
// stack, as they did with bbolt alone).
type kv interface {
	// view runs fn in a read-only transaction that sees one consistent state.
	view(db *DB, fn func(*Tx) error) error
	// update runs fn in a read-write transaction, all of whose writes commit at once or not at all; after
	// the commit (before update returns) it moves the versions of the tables the transaction wrote
	// (Tx.wrote) and signals db.changed. A backend may run fn more than once (etcd, on a conflict), so
	// fn must not act outside the transaction.
	update(db *DB, fn func(*Tx) error) error
	close() error
}

// kvTx is one transaction of a backend.
type kvTx interface {
	// bucket is a bucket Open created (every registered one and the meta bucket).
	bucket(name []byte) kvBucket
	// createBucket creates the bucket unless it exists and says whether it did.
	createBucket(name []byte) (created bool, err error)
	// onCommit runs fn after the transaction committed (not when it rolls back, nor for an attempt that
	// is run again).
	onCommit(fn func())
	// generation identifies the state the transaction reads (bbolt: its transaction id; etcd: its revision).
	generation() int
}

// kvBucket is a bucket within a transaction. Values returned are only valid until the transaction ends.
type kvBucket interface {
	Get(key []byte) []byte // nil when absent
	Put(key, value []byte) error
	Delete(key []byte) error
	ForEach(fn func(k, v []byte) error) error
	Cursor() cursor
	// Sequence is the bucket's counter; NextSequence moves it on by one and returns it.
	Sequence() uint64
	NextSequence() (uint64, error)
	// SetSequence sets the counter (a copy of a store: CopyAll).
	SetSequence(n uint64) error
}

// cursor walks a bucket's keys in byte order; a nil key means it walked off either end. It is a concrete
// type over each backend's cursor, not an interface, so that the keys handed to it do not escape (a
// lookup allocates nothing more on bbolt than it did before the backends).
type cursor struct {
	b *bolt.Cursor
	e *etcdCursor
}

func (c cursor) First() (k, v []byte) {
	if c.b != nil {
		return c.b.First()
	}
	return c.e.first()
}

func (c cursor) Last() (k, v []byte) {
	if c.b != nil {
		return c.b.Last()
	}
	return c.e.last()
}

// Seek moves to the first key >= seek.
func (c cursor) Seek(seek []byte) (k, v []byte) {
	if c.b != nil {
		return c.b.Seek(seek)
	}
	return c.e.seek(seek)
}

func (c cursor) Next() (k, v []byte) {
	if c.b != nil {
		return c.b.Next()
	}
	return c.e.next()
}

func (c cursor) Prev() (k, v []byte) {
	if c.b != nil {
		return c.b.Prev()
	}
	return c.e.prev()
}

// Delete deletes the key the cursor is at.
func (c cursor) Delete() error {
	if c.b != nil {
		return c.b.Delete()
	}
	return c.e.delete()
}
