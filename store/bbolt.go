package store

import (
	bolt "go.etcd.io/bbolt"
)

// boltKV is the store in one bbolt file.
type boltKV struct{ db *bolt.DB }

var _ kv = boltKV{}

func (b boltKV) view(db *DB, fn func(*Tx) error) error {
	return b.db.View(func(tx *bolt.Tx) error { return fn(&Tx{kv: boltTx{tx}, db: db}) })
}

func (b boltKV) update(db *DB, fn func(*Tx) error) error {
	if db.rerun.Load() {
		// A first run whose writes are rolled back (and whose OnCommit functions never run), whatever
		// it returned: the attempt etcd would run again.
		tx, err := b.db.Begin(true)
		if err != nil {
			return err
		}
		func() {
			defer tx.Rollback()
			_ = fn(&Tx{kv: boltTx{tx}, db: db})
		}()
	}
	return b.db.Update(func(tx *bolt.Tx) error {
		t := &Tx{kv: boltTx{tx}, db: db}
		id := uint64(tx.ID())
		tx.OnCommit(func() {
			for _, n := range t.wrote {
				t.committed = append(t.committed, db.versions[n].Add(1))
			}
			if db.gen != nil {
				db.gen.note(id)
			}
			db.signal()
		})
		return fn(t)
	})
}

func (b boltKV) close() error { return b.db.Close() }

// boltTx and boltBucket wrap bbolt's own (each one pointer: put in an interface, they are not allocated).
type boltTx struct{ tx *bolt.Tx }

func (t boltTx) bucket(name []byte) kvBucket { return boltBucket{t.tx.Bucket(name)} }

func (t boltTx) createBucket(name []byte) (bool, error) {
	if t.tx.Bucket(name) != nil {
		return false, nil
	}
	_, err := t.tx.CreateBucket(name)
	return err == nil, err
}

func (t boltTx) onCommit(fn func()) { t.tx.OnCommit(fn) }
func (t boltTx) generation() int    { return t.tx.ID() }

type boltBucket struct{ b *bolt.Bucket }

func (b boltBucket) Get(key []byte) []byte                    { return b.b.Get(key) }
func (b boltBucket) Put(key, value []byte) error              { return b.b.Put(key, value) }
func (b boltBucket) Delete(key []byte) error                  { return b.b.Delete(key) }
func (b boltBucket) ForEach(fn func(k, v []byte) error) error { return b.b.ForEach(fn) }
func (b boltBucket) Cursor() cursor                           { return cursor{b: b.b.Cursor()} }
func (b boltBucket) Sequence() uint64                         { return b.b.Sequence() }
func (b boltBucket) NextSequence() (uint64, error)            { return b.b.NextSequence() }
func (b boltBucket) SetSequence(n uint64) error               { return b.b.SetSequence(n) }
