//go:build !linux

package pglog

import "testing"

// evict drops a file from the page cache on Linux only.
func evict(b *testing.B, path string) {
	b.Skip("dropping a file from the page cache is done on Linux only")
}
