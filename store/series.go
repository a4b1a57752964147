package store

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"time"
)

// Series is a bucket of time-ordered points per key (a project's metric samples): each point is the key,
// a separator and the time as 8 big-endian bytes of Unix nanoseconds, with a value the caller encodes
// (compactly: a month of one-minute points is read at once). Points of one key sort by time, so a window is
// one cursor walk and pruning stops at the first point kept.
type Series struct{ bucket []byte }

func newSeries(name string) *Series {
	registered = append(registered, []byte(name))
	valueBuckets = append(valueBuckets, []byte(name))
	return &Series{bucket: []byte(name)}
}

func seriesKey(key string, t time.Time) []byte {
	k := make([]byte, 0, len(key)+1+8)
	k = append(k, key...)
	k = append(k, sep...)
	return binary.BigEndian.AppendUint64(k, uint64(t.UnixNano()))
}

// Put stores the point of key at t (replacing one at the same instant). The value is copied.
func (s *Series) Put(tx *Tx, key string, t time.Time, value []byte) error {
	if err := tx.kv.bucket(s.bucket).Put(seriesKey(key, t), seal(value)); err != nil {
		return fmt.Errorf("put %s/%s: %w", s.bucket, key, err)
	}
	return nil
}

// Range calls fn with the points of key at from <= t < to, oldest first. The value is only valid during
// the call (it is bbolt's memory): decode it, do not keep it. fn returning an error stops the walk.
func (s *Series) Range(tx *Tx, key string, from, to time.Time, fn func(t time.Time, value []byte) error) error {
	c := tx.cursor(s.bucket)
	end := seriesKey(key, to)
	prefix := len(key) + 1
	for k, v := c.Seek(seriesKey(key, from)); k != nil && bytes.Compare(k, end) < 0; k, v = c.Next() {
		if len(k) != prefix+8 || !bytes.HasPrefix(k, []byte(key+sep)) {
			break
		}
		payload, err := tx.unseal(s.bucket, k, v)
		if err != nil {
			return err
		}
		if err := fn(time.Unix(0, int64(binary.BigEndian.Uint64(k[prefix:]))).UTC(), payload); err != nil {
			return err
		}
	}
	return nil
}

// Last returns the newest point of key (a copy of its value), or ErrNotFound.
func (s *Series) Last(tx *Tx, key string) (time.Time, []byte, error) {
	c := tx.cursor(s.bucket)
	prefix := []byte(key + sep)
	k, v := c.Seek(seriesKey(key, time.Unix(0, -1))) // just past the newest possible point
	if k == nil {
		k, v = c.Last()
	} else {
		k, v = c.Prev()
	}
	if k == nil || len(k) != len(prefix)+8 || !bytes.HasPrefix(k, prefix) {
		return time.Time{}, nil, ErrNotFound
	}
	payload, err := tx.unseal(s.bucket, k, v)
	if err != nil {
		return time.Time{}, nil, err
	}
	return time.Unix(0, int64(binary.BigEndian.Uint64(k[len(prefix):]))).UTC(), bytes.Clone(payload), nil
}

// DeleteBefore deletes the points of key older than t and returns how many.
func (s *Series) DeleteBefore(tx *Tx, key string, t time.Time) (int, error) {
	return s.deleteRange(tx, key, seriesKey(key, time.Unix(0, 0)), seriesKey(key, t))
}

// DeleteKey deletes every point of key.
func (s *Series) DeleteKey(tx *Tx, key string) (int, error) {
	return s.deleteRange(tx, key, []byte(key+sep), seriesKey(key, time.Unix(0, -1)))
}

func (s *Series) deleteRange(tx *Tx, key string, from, to []byte) (int, error) {
	c := tx.cursor(s.bucket)
	prefix := []byte(key + sep)
	n := 0
	if c.e != nil {
		// etcd: the points counted, then deleted in one operation (a month of them is past the number of
		// operations one etcd transaction may hold).
		end := to
		for k, _ := c.Seek(from); k != nil && bytes.Compare(k, to) < 0 && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
			if len(k) != len(prefix)+8 {
				end = bytes.Clone(k)
				break
			}
			n++
		}
		if n == 0 {
			return 0, tx.kv.(*etcdTx).err
		}
		if err := (etcdBucket{t: c.e.t, name: string(s.bucket)}).deleteRange(from, end); err != nil {
			return 0, fmt.Errorf("delete from %s: %w", s.bucket, err)
		}
		return n, nil
	}
	for k, _ := c.Seek(from); k != nil && bytes.Compare(k, to) < 0 && bytes.HasPrefix(k, prefix); k, _ = c.Seek(from) {
		if len(k) != len(prefix)+8 { // another key that merely starts with this one and the separator
			break
		}
		if err := c.Delete(); err != nil {
			return n, fmt.Errorf("delete from %s: %w", s.bucket, err)
		}
		n++
	}
	return n, nil
}

// Keys returns every key that has points (the sweep's way to find series of deleted projects).
func (s *Series) Keys(tx *Tx) ([]string, error) {
	var out []string
	c := tx.cursor(s.bucket)
	for k, _ := c.First(); k != nil; {
		if len(k) < 9 {
			return nil, fmt.Errorf("%s: malformed key %q", s.bucket, k)
		}
		key := string(k[:len(k)-9])
		out = append(out, key)
		k, _ = c.Seek(seriesKey(key, time.Unix(0, -1)))
		if k != nil && bytes.Equal(k, seriesKey(key, time.Unix(0, -1))) {
			k, _ = c.Next()
		}
	}
	return out, nil
}
