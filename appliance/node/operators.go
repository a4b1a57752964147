package node

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance"
)

// OperatorSocket is up's local admin socket in the data directory (mode 0600, in a 0700 directory): what
// only root (or the directory's owner) on the machine may ask of a running appliance, such as making a
// platform operator. It answers POST /operators.
const OperatorSocket = "operator.sock"

// PrintOperator tells who is an operator now, and a new user's password alone on out.
func PrintOperator(errw, out io.Writer, r *api.AddedOperator) {
	if !r.Created {
		fmt.Fprintf(errw, "%s (%s) is a platform operator.\n", r.Email, r.UserID)
		return
	}
	fmt.Fprintf(errw, "Created %s (%s), a platform operator. Their password follows; it is shown only this once.\n", r.Email, r.UserID)
	fmt.Fprintln(out, r.Password)
}

// operatorSocketComponent serves up's local admin socket (see OperatorSocket), sets who may sign up
// (--signup) and, with --operator-email,
// makes that operator at the start; with --plans, it puts the file's plans and default organization quota
// in force.
func (u *Node) operatorSocketComponent() *component {
	var stop func(context.Context) error
	return &component{name: "operator-socket", start: func(ctx context.Context) error {
		// Who may sign up (--signup), set before the API serves.
		if err := u.svc.Tenancy().SetSignupMode(u.cfg.Signup); err != nil {
			return fmt.Errorf("--signup: %w", err)
		}
		if u.cfg.OperatorEmail != "" {
			res, err := u.svc.Tenancy().AddOperator(ctx, &api.AddOperatorRequest{Email: u.cfg.OperatorEmail})
			if err != nil {
				return fmt.Errorf("--operator-email: %w", err)
			}
			PrintOperator(u.out, u.out, res)
		}
		if u.cfg.PlansFile != "" {
			if err := ApplyPlansFile(ctx, u.svc, u.cfg.PlansFile, u.out); err != nil {
				return err
			}
		}
		var err error
		stop, err = ServeOperatorSocket(u.svc, u.dataDir)
		return err
	}, stop: func(ctx context.Context) error {
		if stop == nil {
			return nil
		}
		return stop(ctx)
	}}
}

// ServeOperatorSocket serves svc's local admin socket (OperatorSocket) in dataDir until stop.
func ServeOperatorSocket(svc *appliance.Service, dataDir string) (stop func(context.Context) error, err error) {
	path := filepath.Join(dataDir, OperatorSocket)
	os.Remove(path) // a socket a killed up left (the store's lock says no other up runs here)
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("admin socket: %w", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("admin socket: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /operators", func(w http.ResponseWriter, r *http.Request) {
		var req api.AddOperatorRequest
		if err := json.NewDecoder(io.LimitReader(r.Body, 64<<10)).Decode(&req); err != nil {
			writeSocketJSON(w, http.StatusBadRequest, map[string]string{"error": "invalid JSON body: " + err.Error()})
			return
		}
		res, err := svc.Tenancy().AddOperator(r.Context(), &req)
		if err != nil {
			writeSocketJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
			return
		}
		writeSocketJSON(w, http.StatusOK, res)
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ln) }()
	return func(ctx context.Context) error {
		err := srv.Shutdown(ctx)
		<-done
		os.Remove(path)
		return err
	}, nil
}

func writeSocketJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// ApplyPlansFile puts up --plans FILE in force: the file's plans and default organization quota replace
// the configured ones (refused when a project is on a plan the file drops), and says so on out.
func ApplyPlansFile(ctx context.Context, svc *appliance.Service, path string, out io.Writer) error {
	cfg, err := appliance.ReadPlansFile(path)
	if err != nil {
		return fmt.Errorf("--plans: %w", err)
	}
	changed, err := svc.Tenancy().ReplacePlans(ctx, cfg)
	if err != nil {
		return fmt.Errorf("--plans %s: %w", path, err)
	}
	fmt.Fprintf(out, "Plans: %d plan(s) from %s in force (%d change(s)).\n", len(cfg.Plans), path, changed)
	return nil
}
