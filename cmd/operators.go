package cmd

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance"
	"github.com/theappliance/appliance/appliance/node"
	"github.com/theappliance/appliance/store"
)

func init() { root.AddCommand(newOperatorsCmd()) }

// newOperatorsCmd is the operators command tree (fresh each call: the tests run it concurrently).
func newOperatorsCmd() *cobra.Command {
	ops := &cobra.Command{Use: "operators", Aliases: []string{"operator"}, Short: "Platform operators (as root on the machine)"}
	var dataDir, name string
	add := &cobra.Command{
		Use:   "add EMAIL",
		Short: "Make a user a platform operator, creating the user when there is none (as root or the data directory's owner)",
		Long: `Make the user of EMAIL a platform operator (is_admin): they sign in without an organization and manage
the organizations (appliance orgs ...). A new user gets a generated password, printed once alone on standard
output. Run it on the appliance's machine as root or the data directory's owner: with the appliance
running it goes through up's local admin socket (<data-dir>/operator.sock); stopped, it writes the
metadata store directly.`,
		Example: `  sudo appliance operators add ops@example.com --name "Olga Ops"`,
		Args:    cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			if err := checkDataDirOwner(dataDir, "making an operator"); err != nil {
				return err
			}
			res, err := addOperator(c.Context(), dataDir, &api.AddOperatorRequest{Email: args[0], Name: name})
			if err != nil {
				return err
			}
			node.PrintOperator(c.ErrOrStderr(), c.OutOrStdout(), res)
			return nil
		},
	}
	add.Flags().StringVar(&dataDir, "data-dir", envDefault("APPLIANCE_DATA_DIR", node.Defaults().DataDir), "data directory (APPLIANCE_DATA_DIR)")
	add.Flags().StringVar(&name, "name", "", "display name of a new user")
	ops.AddCommand(add)
	return ops
}

// checkDataDirOwner refuses anyone but root and the data directory's owner.
func checkDataDirOwner(dataDir, what string) error {
	st, err := os.Stat(dataDir)
	if err != nil {
		return fmt.Errorf("data directory: %w", err)
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok && os.Geteuid() != 0 && uint32(os.Geteuid()) != sys.Uid {
		return fmt.Errorf("%s is for root or the owner of %s (uid %d); you are uid %d: run it as one of them (sudo)",
			what, dataDir, sys.Uid, os.Geteuid())
	}
	return nil
}

// addOperator asks the running appliance through its admin socket, or, when none answers there, writes
// the stopped appliance's metadata store itself.
func addOperator(ctx context.Context, dataDir string, req *api.AddOperatorRequest) (*api.AddedOperator, error) {
	sock := filepath.Join(dataDir, node.OperatorSocket)
	cl := &http.Client{Timeout: time.Minute, Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	body, _ := json.Marshal(req)
	resp, err := cl.Post("http://appliance/operators", "application/json", bytes.NewReader(body))
	if err == nil {
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		if resp.StatusCode != http.StatusOK {
			var e struct{ Error string }
			if json.Unmarshal(b, &e) == nil && e.Error != "" {
				return nil, errors.New(e.Error)
			}
			return nil, fmt.Errorf("the appliance's admin socket answered %s", resp.Status)
		}
		var out api.AddedOperator
		if err := json.Unmarshal(b, &out); err != nil {
			return nil, fmt.Errorf("the appliance's admin socket: %w", err)
		}
		return &out, nil
	}
	if !errors.Is(err, syscall.ENOENT) && !errors.Is(err, syscall.ECONNREFUSED) {
		return nil, fmt.Errorf("the appliance's admin socket %s: %w", sock, err)
	}
	// No appliance runs: the store itself (it is locked while one does).
	for _, f := range []string{node.MetaFile(dataDir), filepath.Join(dataDir, "secret.key")} {
		if _, err := os.Stat(f); err != nil {
			return nil, fmt.Errorf("%s holds no appliance (%w): start it once with appliance up, or pass --data-dir", dataDir, err)
		}
	}
	db, err := store.Open(node.MetaFile(dataDir))
	if err != nil {
		return nil, err
	}
	defer db.Close()
	box, err := appliance.OpenSecretBox(filepath.Join(dataDir, "secret.key"))
	if err != nil {
		return nil, err
	}
	svc := appliance.New(appliance.Config{DataDir: dataDir}, appliance.Deps{DB: db, Box: box, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	return svc.Tenancy().AddOperator(ctx, req)
}
