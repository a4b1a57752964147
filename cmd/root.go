// Package cmd holds the cobra commands: `appliance up` (the server) and the CLI client commands.
package cmd

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

// Version is set at build time with -ldflags "-X github.com/theappliance/appliance/cmd.Version=...".
var Version = "0.1.0-dev"

var root = &cobra.Command{
	Use:           "appliance",
	Short:         "A self-hosted managed PostgreSQL service in one binary",
	SilenceUsage:  true,
	SilenceErrors: true,
}

func init() {
	root.AddCommand(&cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Run:   func(c *cobra.Command, _ []string) { fmt.Fprintln(c.OutOrStdout(), "appliance", Version) },
	})
}

// Execute runs the command line.
func Execute() {
	if err := root.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

// envDefault returns the environment variable's value, or def when unset.
func envDefault(name, def string) string {
	if v, ok := os.LookupEnv(name); ok && v != "" {
		return v
	}
	return def
}

// envInt is envDefault for integers (an unparsable value falls back to def).
func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil {
		return v
	}
	return def
}

// envBool is true when the variable is set to 1, true, yes or on.
func envBool(name string) bool {
	switch strings.ToLower(os.Getenv(name)) {
	case "1", "true", "yes", "on":
		return true
	}
	return false
}

// envDuration is envDefault for durations such as 5s (an unparsable value falls back to def).
func envDuration(name string, def time.Duration) time.Duration {
	if v, err := time.ParseDuration(os.Getenv(name)); err == nil {
		return v
	}
	return def
}
