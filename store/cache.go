package store

import "sync"

// Cache keeps what was derived from store records (a key's principal, a project's studio target, the
// active webhook endpoints), each entry valid only while the store versions it was read at are current
// (Table.Version): a write that commits to any of the tables it came from makes every entry of the cache
// a miss, so no entry outlives a revocation, a role change or a project's suspension
// (docs/api-decisions.md "Studio"). The zero Cache is empty.
type Cache[V any] struct {
	mu      sync.RWMutex
	entries map[string]cached[V]
}

type cached[V any] struct {
	version uint64
	value   V
}

// cacheMax bounds a cache: past it, the next put starts a new map (entries of a past version, such as
// those of deleted keys, go too).
const cacheMax = 4096

// Get returns the value cached under key when it was read at version.
func (c *Cache[V]) Get(key string, version uint64) (V, bool) {
	c.mu.RLock()
	e, ok := c.entries[key]
	c.mu.RUnlock()
	if !ok || e.version != version {
		var zero V
		return zero, false
	}
	return e.value, true
}

// Put caches value under key as read at version (the version loaded before the read's transaction began).
func (c *Cache[V]) Put(key string, version uint64, value V) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.entries == nil || len(c.entries) >= cacheMax {
		c.entries = map[string]cached[V]{}
	}
	c.entries[key] = cached[V]{version: version, value: value}
}
