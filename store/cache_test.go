package store

import (
	"fmt"
	"testing"
)

// TestCache: an entry is a hit only at the version it was put at; past cacheMax entries the next put
// starts over.
func TestCache(t *testing.T) {
	var c Cache[string]
	if _, ok := c.Get("k", 1); ok {
		t.Fatal("empty cache hit")
	}
	c.Put("k", 1, "v")
	if v, ok := c.Get("k", 1); !ok || v != "v" {
		t.Fatalf("Get(k, 1) = %q, %v; want v, true", v, ok)
	}
	if _, ok := c.Get("k", 2); ok {
		t.Fatal("hit at another version")
	}
	for i := range cacheMax {
		c.Put(fmt.Sprint(i), 1, "x")
	}
	if _, ok := c.Get("k", 1); ok {
		t.Fatal("the cache kept growing past cacheMax")
	}
}
