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
	"github.com/theappliance/appliance/store"
)

// operatorSocket is up's local admin socket in the data directory (mode 0600, in a 0700 directory): what
// only root (or the directory's owner) on the machine may ask of a running appliance, such as making a
// platform operator. It answers POST /operators.
const operatorSocket = "operator.sock"

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
			printOperator(c.ErrOrStderr(), c.OutOrStdout(), res)
			return nil
		},
	}
	add.Flags().StringVar(&dataDir, "data-dir", envDefault("APPLIANCE_DATA_DIR", defaultDataDir()), "data directory (APPLIANCE_DATA_DIR)")
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
	sock := filepath.Join(dataDir, operatorSocket)
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
	for _, f := range []string{metaFile(dataDir), filepath.Join(dataDir, "secret.key")} {
		if _, err := os.Stat(f); err != nil {
			return nil, fmt.Errorf("%s holds no appliance (%w): start it once with appliance up, or pass --data-dir", dataDir, err)
		}
	}
	db, err := store.Open(metaFile(dataDir))
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

// printOperator tells who is an operator now, and a new user's password alone on out.
func printOperator(errw, out io.Writer, r *api.AddedOperator) {
	if !r.Created {
		fmt.Fprintf(errw, "%s (%s) is a platform operator.\n", r.Email, r.UserID)
		return
	}
	fmt.Fprintf(errw, "Created %s (%s), a platform operator. Their password follows; it is shown only this once.\n", r.Email, r.UserID)
	fmt.Fprintln(out, r.Password)
}

// operatorSocketComponent serves up's local admin socket (see operatorSocket) and, with --operator-email,
// makes that operator at the start.
func (u *upRun) operatorSocketComponent() *component {
	var srv *http.Server
	var done chan struct{}
	path := ""
	return &component{name: "operator-socket", start: func(ctx context.Context) error {
		if u.cfg.OperatorEmail != "" {
			res, err := u.svc.Tenancy().AddOperator(ctx, &api.AddOperatorRequest{Email: u.cfg.OperatorEmail})
			if err != nil {
				return fmt.Errorf("--operator-email: %w", err)
			}
			printOperator(u.out, u.out, res)
		}
		path = filepath.Join(u.dataDir, operatorSocket)
		os.Remove(path) // a socket a killed up left (the store's lock says no other up runs here)
		ln, err := net.Listen("unix", path)
		if err != nil {
			return fmt.Errorf("admin socket: %w", err)
		}
		if err := os.Chmod(path, 0o600); err != nil {
			ln.Close()
			return fmt.Errorf("admin socket: %w", err)
		}
		mux := http.NewServeMux()
		mux.HandleFunc("POST /operators", func(w http.ResponseWriter, r *http.Request) {
			var req api.AddOperatorRequest
			if err := json.NewDecoder(io.LimitReader(r.Body, 64<<10)).Decode(&req); err != nil {
				writeSocketJSON(w, http.StatusBadRequest, map[string]string{"error": "invalid JSON body: " + err.Error()})
				return
			}
			res, err := u.svc.Tenancy().AddOperator(r.Context(), &req)
			if err != nil {
				writeSocketJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
				return
			}
			writeSocketJSON(w, http.StatusOK, res)
		})
		srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		done = make(chan struct{})
		go func() { defer close(done); _ = srv.Serve(ln) }()
		return nil
	}, stop: func(ctx context.Context) error {
		if srv == nil {
			return nil
		}
		err := srv.Shutdown(ctx)
		<-done
		os.Remove(path)
		return err
	}}
}

func writeSocketJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
