package store

import (
	"encoding/binary"
	"sync"
)

// etcdValues is what this process last knew of keys of the store on etcd: values it read or committed,
// each with its mod revision and the revision it was known at. The first attempt of a read-write
// transaction reads a key from here rather than from etcd (a read less on each record it reads again,
// which most API writes do: the project, the record they change), as it could read a lagging member: the
// commit's compares prove the value still current, and when it was not the transaction runs again, then
// reading etcd. The watch of the version keys drops the values of the keys another client's commit wrote
// (named in the version key's value; all of the bucket's when it names none), so that the values read are
// seldom stale; a watch cut drops them all.
type etcdValues struct {
	mu      sync.Mutex
	buckets map[string]*etcdValueBucket
	n       int // the values held
}

type etcdValueBucket struct {
	// written is the revision of the last commit known to have written the bucket: no value known at an
	// older revision is kept (it may be stale).
	written int64
	keys    map[string]etcdValue // full key → value
}

// etcdValue is a key's value (nil: absent), its mod revision (0: absent) and the revision it was known at;
// gone: no value, a commit at revision at changed the key (a value known before is not kept).
type etcdValue struct {
	v       []byte
	mod, at int64
	gone    bool
}

// etcdMaxValues bounds the values kept: past it, they are all dropped.
const etcdMaxValues = 8192

func (c *etcdValues) get(bucket, k string) (etcdValue, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	b := c.buckets[bucket]
	if b == nil {
		return etcdValue{}, false
	}
	v, ok := b.keys[k]
	return v, ok && !v.gone
}

// put keeps v as key k's value unless a value known at a later revision is kept, or the bucket was written
// after v.at. The value's bytes are kept as they are: the caller does not change them.
func (c *etcdValues) put(bucket, k string, v etcdValue) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.buckets == nil || c.n >= etcdMaxValues {
		c.buckets, c.n = map[string]*etcdValueBucket{}, 0
	}
	b := c.buckets[bucket]
	if b == nil {
		b = &etcdValueBucket{keys: map[string]etcdValue{}}
		c.buckets[bucket] = b
	}
	if v.at < b.written {
		return
	}
	old, ok := b.keys[k]
	if ok && old.at > v.at {
		return
	}
	if !ok {
		c.n++
	}
	b.keys[k] = v
}

// written drops the bucket's values known before rev, a revision at which a commit wrote the bucket.
func (c *etcdValues) written(bucket string, rev int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.buckets == nil {
		c.buckets = map[string]*etcdValueBucket{}
	}
	b := c.buckets[bucket]
	if b == nil {
		b = &etcdValueBucket{keys: map[string]etcdValue{}}
		c.buckets[bucket] = b
	}
	if rev <= b.written {
		return
	}
	b.written = rev
	for k, v := range b.keys {
		if v.at < rev {
			delete(b.keys, k)
			c.n--
		}
	}
}

// reset drops every value.
func (c *etcdValues) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.buckets, c.n = nil, 0
}

// changed drops key k's value known before rev, a revision at which a commit wrote it.
func (c *etcdValues) changed(bucket, k string, rev int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.buckets == nil {
		c.buckets = map[string]*etcdValueBucket{}
	}
	b := c.buckets[bucket]
	if b == nil {
		b = &etcdValueBucket{keys: map[string]etcdValue{}}
		c.buckets[bucket] = b
	}
	old, ok := b.keys[k]
	if ok && old.at >= rev {
		return
	}
	if !ok {
		c.n++
	}
	b.keys[k] = etcdValue{gone: true, at: rev} // a value known before rev, put later, is not kept
}

// etcdChangedMax bounds the keys a bucket's version key names (a transaction that wrote more of the
// bucket's leaves it empty: every value of the bucket is dropped).
const etcdChangedMax = 64

// etcdChangedValue is the value of a bucket's version key naming keys (relative to the bucket), each
// as its length (uvarint) and its bytes; empty when there are none.
func etcdChangedValue(keys []string) []byte {
	var out []byte
	for _, k := range keys {
		out = binary.AppendUvarint(out, uint64(len(k)))
		out = append(out, k...)
	}
	return out
}

// etcdChangedKeys reads the keys a version key's value names; false when it names none (empty: written
// by a transaction that wrote too many, or by an appliance that named none) or is not such a value.
func etcdChangedKeys(v []byte) ([]string, bool) {
	if len(v) == 0 {
		return nil, false
	}
	var keys []string
	for len(v) > 0 {
		n, w := binary.Uvarint(v)
		if w <= 0 || uint64(len(v)-w) < n {
			return nil, false
		}
		keys = append(keys, string(v[w:w+int(n)]))
		v = v[w+int(n):]
	}
	return keys, true
}
