package pglog

import (
	"os"
	"syscall"
	"testing"
)

// evict drops the pages of the file at path from the page cache (posix_fadvise POSIX_FADV_DONTNEED; the
// file's pages are clean, it was synced when written).
func evict(b *testing.B, path string) {
	b.Helper()
	f, err := os.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	const fadvDontNeed = 4
	if _, _, errno := syscall.Syscall6(syscall.SYS_FADVISE64, f.Fd(), 0, 0, fadvDontNeed, 0, 0); errno != 0 {
		b.Fatalf("fadvise: %v", errno)
	}
}
