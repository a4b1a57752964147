package cmd

import (
	"os"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/theappliance/appliance/appliance/node"
)

// TestUpFlagDefaultsAreNodeDefaults: up's flags, with no environment, fill exactly node.Defaults() (the one
// source of the defaults, which a Go test starting an appliance also reads).
func TestUpFlagDefaultsAreNodeDefaults(t *testing.T) {
	for _, kv := range os.Environ() {
		if name, _, _ := strings.Cut(kv, "="); strings.HasPrefix(name, "APPLIANCE_") {
			t.Setenv(name, "")
			os.Unsetenv(name)
		}
	}
	var cfg UpConfig
	c := &cobra.Command{Use: "up"}
	upFlags(c, &cfg)
	if err := c.ParseFlags(nil); err != nil {
		t.Fatal(err)
	}
	if want := node.Defaults(); cfg != want {
		t.Fatalf("up's flags' defaults differ from node.Defaults():\n got %+v\nwant %+v", cfg, want)
	}
}
