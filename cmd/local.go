package cmd

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance"
	"github.com/theappliance/appliance/appliance/node"
)

// The local appliance: with no --api, APPLIANCE_API_URL or CLI config, the CLI uses the appliance of this
// machine, the one `appliance up` runs on the data directory it would use (APPLIANCE_DATA_DIR, else
// node.DefaultDataDir), through its first start's credentials (bootstrap.json). It trusts that file only
// when it is the caller's own (owned by the caller's user) and no other user could have written it (not
// group- or world-writable) — a file another user wrote could send the caller's commands, and the key,
// elsewhere — and when the caller can read it; otherwise it prints the `appliance login` command to run.

// localAppliance is what the data directory says of the local appliance.
type localAppliance struct {
	path string               // its bootstrap.json
	boot *appliance.Bootstrap // nil: not usable (refused says why) or none there
	// refused is why the bootstrap is not used ("": it is, or there is none); login is the command to run then.
	refused, login string
}

// findLocalAppliance looks at the data directory up would use. nil: no bootstrap.json there.
func findLocalAppliance() *localAppliance {
	dataDir := envDefault("APPLIANCE_DATA_DIR", node.Defaults().DataDir)
	l := &localAppliance{path: filepath.Join(dataDir, "bootstrap.json")}
	fi, err := os.Stat(l.path)
	if os.IsNotExist(err) {
		return nil
	}
	// The URL and CA path of the hint: the file's when it can be read at all (they are not secret), else
	// up's defaults.
	hintURL, hintCA := "https://"+envDefault("APPLIANCE_LISTEN", node.Defaults().Listen), filepath.Join(dataDir, "ca", "ca.crt")
	b, rerr := os.ReadFile(l.path)
	var boot appliance.Bootstrap
	if rerr == nil {
		if err := json.Unmarshal(b, &boot); err == nil && boot.APIURL != "" {
			hintURL, hintCA = boot.APIURL, boot.CACert
		}
	}
	l.login = fmt.Sprintf("appliance login --api %s --ca-cert %s", hintURL, hintCA)
	switch st, _ := fi.Sys().(*syscall.Stat_t); {
	case err != nil:
		l.refused = err.Error()
	case st != nil && int(st.Uid) != os.Geteuid():
		l.refused = fmt.Sprintf("it belongs to uid %d, not to you (uid %d)", st.Uid, os.Geteuid())
	case fi.Mode().Perm()&0o022 != 0:
		l.refused = fmt.Sprintf("its mode %v lets other users write it", fi.Mode().Perm())
	case rerr != nil:
		l.refused = rerr.Error()
	case boot.APIURL == "" || boot.APIKey == "":
		l.refused = "it holds no api_url and api_key"
	default:
		l.boot = &boot
	}
	return l
}

// use fills c from the local appliance and says so on w (once: resolve runs once per command).
func (l *localAppliance) use(c *conn, w io.Writer) {
	c.apiURL, c.key, c.caCert, c.source = strings.TrimRight(l.boot.APIURL, "/"), l.boot.APIKey, l.boot.CACert, "the local appliance ("+l.path+")"
	if w != nil {
		fmt.Fprintf(w, "Using the local appliance at %s (credentials from %s; choose another with --api or appliance login).\n", c.apiURL, l.path)
	}
}

var _ = registerClientCommand(newStatusCmd)

func newStatusCmd(o *clientOpts) *cobra.Command {
	return &cobra.Command{
		Use:   "status",
		Short: "Show which appliance the CLI uses (URL, where that came from, the key's prefix) and its health",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			cn, err := o.resolve(nil)
			if err != nil {
				return err
			}
			out := c.OutOrStdout()
			if cn.apiURL == "" {
				_, err := cn.client(true)
				return err
			}
			key := "(none: not logged in)"
			if cn.key != "" {
				key = keyPrefix(cn.key) + "… (the secret is not shown)"
			}
			ca := "(the system's roots)"
			if cn.caCert != "" {
				ca = cn.caCert
				if strings.Contains(ca, "-----BEGIN") {
					ca = "(inline PEM)"
				}
			}
			printFields(out, "%-10s%s\n", [][]string{{"API:", cn.apiURL}, {"From:", cn.source}, {"API key:", key}, {"CA cert:", ca}})
			cl, err := cn.client(true)
			if err != nil {
				return err
			}
			var st api.Status
			if err := cl.do(c.Context(), http.MethodGet, "/status", nil, &st); err != nil {
				fmt.Fprintf(out, "%-10s%s\n", "Health:", "unreachable")
				return fmt.Errorf("the appliance at %s does not answer: %w", cn.apiURL, err)
			}
			fmt.Fprintf(out, "%-10s%s\n", "Health:", st.Status)
			for _, comp := range st.Components {
				fmt.Fprintf(out, "  %-22s%s\n", comp.Name, comp.Status)
			}
			return nil
		},
	}
}

// keyPrefix is the part of an API key that names it without giving it away, as the API lists keys
// (key_prefix: "<prefix>_live_" and 6 characters of the secret); a key of another form shows 8 characters
// at most, never more than half of it.
func keyPrefix(key string) string {
	if i := strings.Index(key, "_live_"); i >= 0 && len(key) > i+6+12 {
		return key[:i+6+6]
	}
	return key[:min(8, len(key)/2)]
}
