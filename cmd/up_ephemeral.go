package cmd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/theappliance/appliance/appliance/node"
)

// ephemeralDefaults are up --ephemeral's own defaults where the flag and its environment variable are not
// given: the temporary directory is made in the system's (not in the default data directory), and no
// spare clusters are kept.
func ephemeralDefaults(c *cobra.Command, cfg *UpConfig) {
	given := func(flag string) bool {
		return c.Flags().Changed(flag) || os.Getenv(upEnv(flag)) != "" || cfgFileSet(c, flag)
	}
	if !given("data-dir") {
		cfg.DataDir = ""
	}
	if !given("spare-clusters") {
		cfg.Spares = 0
	}
}

// ephemeralCredentials is the JSON line up --ephemeral prints once it is up.
type ephemeralCredentials struct {
	APIURL        string `json:"api_url"`
	CACert        string `json:"ca_cert"`      // the CA's certificate (PEM)
	CACertFile    string `json:"ca_cert_file"` // the same in a file (gone at the exit)
	APIKey        string `json:"api_key"`
	OwnerEmail    string `json:"owner_email"`
	OwnerPassword string `json:"owner_password"`
	KVRESP        string `json:"kv_resp"` // host:port of the key-value stores' RESP front (TLS)
	KVREST        string `json:"kv_rest"` // base URL of their REST front
	PID           int    `json:"pid"`
	DataDir       string `json:"data_dir"`
}

// announceEphemeral prints a throwaway appliance's credentials as one JSON line on w, and writes them to
// envFile ("": none) in dotenv form: the CLI's variables (APPLIANCE_API_URL, APPLIANCE_API_KEY,
// APPLIANCE_CA_CERT), so a shell that loads the file runs the CLI against it.
func announceEphemeral(n *node.Node, envFile string, w io.Writer) error {
	boot := n.Bootstrap()
	if boot == nil {
		return errors.New("ephemeral: the appliance made no credentials (not a first start)")
	}
	pem, err := n.CACertPEM()
	if err != nil {
		return err
	}
	cr := ephemeralCredentials{APIURL: n.APIURL(), CACert: string(pem), CACertFile: n.CACertPath(), APIKey: boot.APIKey,
		OwnerEmail: boot.Email, OwnerPassword: boot.Password, KVRESP: n.KVAddr(), KVREST: "https://" + n.KVRESTAddr(),
		PID: os.Getpid(), DataDir: n.DataDir()}
	if envFile != "" {
		var b strings.Builder
		for _, kv := range [][2]string{{"APPLIANCE_API_URL", cr.APIURL}, {"APPLIANCE_CA_CERT", cr.CACertFile}, {"APPLIANCE_API_KEY", cr.APIKey},
			{"APPLIANCE_OWNER_EMAIL", cr.OwnerEmail}, {"APPLIANCE_OWNER_PASSWORD", cr.OwnerPassword}, {"APPLIANCE_KV_RESP", cr.KVRESP},
			{"APPLIANCE_KV_REST", cr.KVREST}, {"APPLIANCE_PID", fmt.Sprint(cr.PID)}} {
			fmt.Fprintf(&b, "%s=%s\n", kv[0], dotenvQuote(kv[1]))
		}
		if err := writePrivateFile(envFile, []byte(b.String())); err != nil {
			return err
		}
	}
	line, err := json.Marshal(cr)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", line)
	return err
}

// dotenvQuote is v as a dotenv value: in double quotes, with backslashes, quotes, dollars and newlines
// escaped.
func dotenvQuote(v string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`, `$`, `\$`, "\n", `\n`).Replace(v) + `"`
}

// exitWithParent is ctx, also done once the process that started this one has ended (this process is
// then another's child: its parent pid changes). Polled: PR_SET_PDEATHSIG would fire when the parent's
// starting THREAD ends, which in a multi-threaded parent (a Go or Node test runner) is not the parent's end.
func exitWithParent(ctx context.Context) (context.Context, context.CancelFunc) {
	ppid := os.Getppid()
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if os.Getppid() != ppid {
					fmt.Fprintln(os.Stderr, "the parent process is gone: stopping")
					cancel()
					return
				}
			}
		}
	}()
	return ctx, cancel
}
