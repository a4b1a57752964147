package cmd

import (
	"bytes"
	"os"
	"strings"
	"testing"
	"time"
)

// TestUpVerifyBackupsEvery: --verify-backups-every restore-tests weekly by default, takes a duration (0
// turns it off), and a negative one is refused before anything is set up.
func TestUpVerifyBackupsEvery(t *testing.T) {
	t.Parallel()
	if got := upConfig(t).VerifyBackupsEvery; got != 168*time.Hour {
		t.Errorf("default --verify-backups-every %s, want 168h", got)
	}
	if got := upConfig(t, "--verify-backups-every", "0").VerifyBackupsEvery; got != 0 {
		t.Errorf("--verify-backups-every 0 gives %s", got)
	}
	cfg := upConfig(t, "--verify-backups-every", "-1h")
	err := runUp(t.Context(), cfg, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "--verify-backups-every: -1h0m0s is negative") {
		t.Fatalf("--verify-backups-every -1h: %v", err)
	}
	if _, err := os.Stat(cfg.DataDir); !os.IsNotExist(err) {
		t.Fatalf("--verify-backups-every -1h: the data directory was made (%v)", err)
	}
}
