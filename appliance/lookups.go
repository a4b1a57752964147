package appliance

import (
	"sync"

	"github.com/theappliance/appliance/store"
)

// recordCache keeps what was derived from store records (a key's principal, a project's studio target), each
// entry valid only while the store versions it was read at are current (store.Table.Version): a write that
// commits to any of the tables it came from makes every entry of the cache a miss, so no entry outlives a
// revocation, a role change or a project's suspension (docs/api-decisions.md "Studio").
type recordCache[V any] struct {
	mu      sync.RWMutex
	entries map[string]cachedRecord[V]
}

type cachedRecord[V any] struct {
	version uint64
	value   V
}

// recordCacheMax bounds a cache: past it, the next put starts a new map (entries of a past version, such as
// those of deleted keys, go too).
const recordCacheMax = 4096

// get returns the value cached under key when it was read at version.
func (c *recordCache[V]) get(key string, version uint64) (V, bool) {
	c.mu.RLock()
	e, ok := c.entries[key]
	c.mu.RUnlock()
	if !ok || e.version != version {
		var zero V
		return zero, false
	}
	return e.value, true
}

// put caches value under key as read at version (the version loaded before the read's transaction began).
func (c *recordCache[V]) put(key string, version uint64, value V) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.entries == nil || len(c.entries) >= recordCacheMax {
		c.entries = map[string]cachedRecord[V]{}
	}
	c.entries[key] = cachedRecord[V]{version: version, value: value}
}

// authVersion sums the versions of the tables an API key's principal is read from (the key, its creator's
// user record with the memberships and roles, the organizations): it changes whenever one of them does.
func (s *Service) authVersion() uint64 {
	return store.APIKeys.Version(s.db) + store.Users.Version(s.db) + store.Organizations.Version(s.db)
}

// projectVersion sums the versions of the tables a project's studio target is read from.
func (s *Service) projectVersion() uint64 {
	return store.Projects.Version(s.db) + store.Instances.Version(s.db)
}
