package cmd

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance/backup/walsock"
	"github.com/theappliance/appliance/appliance/node"
)

func init() {
	// PostgreSQL's archive_command and restore_command with a bucket as the backup store (walsock).
	root.AddCommand(&cobra.Command{
		Use:                "wal",
		Short:              "Carry a WAL file between PostgreSQL and the appliance (run by PostgreSQL)",
		Hidden:             true,
		DisableFlagParsing: true,
		Run: func(c *cobra.Command, args []string) {
			if code := walsock.Main(args, c.ErrOrStderr()); code != 0 {
				os.Exit(code)
			}
		},
	})
}

// runningComponent is the component named name of the /status of the appliance running on dataDir: on
// the operator listener when up has one (--metrics-listen), else on the API's (--listen), with the metrics
// token when one is set (/status has its details for the token's bearer or on the operator listener; else
// each component's status only); over HTTPS trusting the data directory's CA (and the system's roots, for
// an ACME certificate).
func runningComponent(ctx context.Context, cfg node.Config, dataDir, name string) (*api.Component, error) {
	addr, flag := cfg.Listen, "--listen"
	if cfg.MetricsListen != "" {
		addr, flag = cfg.MetricsListen, "--metrics-listen"
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", flag, addr, err)
	}
	if port == "0" {
		return nil, fmt.Errorf("%s %s picks its port at start: give doctor the address up printed", flag, addr)
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
		if ip != nil && ip.To4() == nil {
			host = "::1"
		}
	}
	cl, err := newAPIClient("https://"+net.JoinHostPort(host, port), cfg.MetricsToken, filepath.Join(dataDir, "ca", "ca.crt"))
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	var st api.Status
	if err := cl.do(ctx, "GET", "/status", nil, &st); err != nil {
		return nil, err
	}
	for _, c := range st.Components {
		if c.Name == name {
			return &c, nil
		}
	}
	return nil, fmt.Errorf("its /status has no %s component (no data plane)", name)
}
