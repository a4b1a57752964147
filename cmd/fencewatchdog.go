package cmd

import (
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/theappliance/appliance/appliance/nodeloss"
)

func init() {
	// A cluster node's self-fence watchdog (started by up, fed its lease's deadline on stdin): it fences
	// the node's instances when the deadline passes, even while up is frozen (nodeloss.RunWatchdog).
	var dir string
	c := &cobra.Command{
		Use:    "fence-watchdog",
		Short:  "Fence this node's instances when its cluster lease may have lapsed (run by up)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			// up's signals (a Ctrl-C to its process group) are not this process's to act on: up tells it
			// to stop on its pipe, and its pipe's end is up's death.
			signal.Ignore(os.Interrupt, syscall.SIGTERM)
			log := slog.New(slog.NewTextHandler(c.ErrOrStderr(), nil)).With("component", "fence-watchdog")
			return nodeloss.RunWatchdog(c.Context(), os.Stdin, filepath.Join(dir, "instances"), log)
		},
	}
	c.Flags().StringVar(&dir, "data-dir", "", "the node's data directory")
	_ = c.MarkFlagRequired("data-dir")
	root.AddCommand(c)
}
