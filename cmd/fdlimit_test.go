package cmd

import (
	"bytes"
	"os"
	"strings"
	"testing"
)

// TestUpRefusesBadConnectionLimits: a connection limit that is not a positive number is refused before
// anything is set up.
func TestUpRefusesBadConnectionLimits(t *testing.T) {
	t.Parallel()
	for _, c := range [][2]string{{"--kv-max-unauthenticated", "0"}, {"--kv-max-unauthenticated-per-address", "-1"},
		{"--max-connections-per-address", "-1"}, {"--kv-auth-timeout", "0s"}, {"--max-connections", "0"}} {
		cfg := upConfig(t, c[0], c[1])
		err := runUp(t.Context(), cfg, &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), c[0]) {
			t.Fatalf("%s %s: %v", c[0], c[1], err)
		}
		if _, err := os.Stat(cfg.DataDir); !os.IsNotExist(err) {
			t.Fatalf("%s %s: the data directory was made (%v)", c[0], c[1], err)
		}
	}
}
