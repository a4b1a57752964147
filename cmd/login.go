package cmd

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance/certs"
	"golang.org/x/term"
)

type loginOpts struct {
	deviceName string
	keyName    string
	noWait     bool
	resume     bool
	interval   time.Duration
	timeout    time.Duration
}

var _ = registerClientCommand(newLoginCmd)

func newLoginCmd(o *clientOpts) *cobra.Command {
	var lo loginOpts
	cmd := &cobra.Command{
		Use:   "login",
		Short: "Log this CLI in to an appliance (device login approved by a signed-in user)",
		Long: `Log this CLI in with a device login: the CLI opens a login session and prints how to approve it;
a signed-in user approves it in the dashboard or with ` + "`appliance login approve`" + `; the CLI then receives a
new API key for the user's organization and saves it, with the API URL and CA certificate, in the CLI
config (mode 0600).`,
		Example: `  appliance login --api https://127.0.0.1:7443 --ca-cert ~/.local/share/appliance/ca/ca.crt
  appliance login --api https://db.example.com --no-wait && appliance login --resume`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error { return runLogin(c, o, lo) },
	}
	f := cmd.Flags()
	f.StringVar(&lo.deviceName, "device-name", "", "name of this device, shown to the approving user (default: the host name)")
	f.StringVar(&lo.keyName, "key-name", "", `name of the API key to mint (default: "CLI on <device-name>")`)
	f.BoolVar(&lo.noWait, "no-wait", false, "start the login, print how to approve it and exit; finish with: appliance login --resume")
	f.BoolVar(&lo.resume, "resume", false, "finish the login started with --no-wait")
	f.DurationVar(&lo.interval, "poll-interval", 2*time.Second, "how often to ask whether the login was approved")
	f.DurationVar(&lo.timeout, "timeout", 0, "give up waiting after this long (default: when the login session expires)")
	cmd.MarkFlagsMutuallyExclusive("no-wait", "resume")
	cmd.AddCommand(newLoginApproveCmd(o))
	return cmd
}

func runLogin(c *cobra.Command, o *clientOpts, lo loginOpts) error {
	ctx, out := c.Context(), c.OutOrStdout()
	if lo.interval <= 0 {
		return errors.New("--poll-interval must be positive")
	}
	cn, err := o.resolve(c.ErrOrStderr())
	if err != nil {
		return err
	}
	if lo.resume {
		p := cn.cfg.PendingLogin
		if p == nil {
			return errors.New("no pending login to resume: start one with `appliance login --no-wait`")
		}
		if o.api != "" && !sameURL(cn.apiURL, p.APIURL) {
			return fmt.Errorf("the pending login is for %s, not %s", p.APIURL, cn.apiURL)
		}
		cl, err := newAPIClient(p.APIURL, "", p.CACert)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "Waiting for approval of login session %s (Ctrl-C to stop)...\n", p.SessionID)
		return waitForLogin(ctx, c, cl, cn.cfg, p, lo)
	}
	if o.api == "" && os.Getenv("APPLIANCE_API_URL") == "" && cn.apiURL != "" && cn.local == nil && strings.HasPrefix(cn.source, "the CLI config") {
		fmt.Fprintf(c.ErrOrStderr(), "Logging in to %s (from the CLI config; choose another with --api).\n", cn.apiURL)
	}
	cl, err := cn.client(true)
	if err != nil {
		return err
	}
	// Keep the CA as inline PEM in the pending login: the file named by --ca-cert may not outlive it.
	caPEM := ""
	if cn.caCert != "" {
		b, _, err := certs.ReadCA(cn.caCert)
		if err != nil {
			return err
		}
		caPEM = string(b)
	}
	// Fail before a key is minted if the config cannot be written: the key is delivered only once.
	if err := saveConfig(cn.cfg); err != nil {
		return err
	}

	dev := strings.TrimSpace(lo.deviceName)
	if dev == "" {
		dev, _ = os.Hostname()
	}
	body := api.CLILoginStartRequest{DeviceName: dev, KeyName: lo.keyName}
	var st api.CLILoginStart
	if err := cl.do(ctx, http.MethodPost, "/v1/cli/login/sessions", body, &st); err != nil {
		return fmt.Errorf("start login: %w", err)
	}
	approve := fmt.Sprintf("appliance login approve %s --api %s", st.SessionID, cn.apiURL)
	if cn.caCert != "" && !strings.Contains(cn.caCert, "-----BEGIN") {
		approve += " --ca-cert " + cn.caCert
	}
	fmt.Fprintf(out, "Login session: %s (expires %s)\n", st.SessionID, st.ExpiresAt.Local().Format(time.RFC3339))
	fmt.Fprintf(out, "Code: %s (approve only if the page shows the same code)\n", st.UserCode)
	fmt.Fprintf(out, "Open %s/cli/login/%s in a signed-in browser, or approve from a signed-in terminal with:\n  %s --email <you>\n",
		cn.apiURL, st.SessionID, approve)
	p := &pendingLogin{APIURL: cn.apiURL, CACert: caPEM, SessionID: st.SessionID, PollToken: st.PollToken, ExpiresAt: st.ExpiresAt}
	if lo.noWait {
		cn.cfg.PendingLogin = p
		if err := saveConfig(cn.cfg); err != nil {
			return err
		}
		fmt.Fprintln(out, "Once it is approved, finish with: appliance login --resume")
		return nil
	}
	fmt.Fprintln(out, "Waiting for approval (Ctrl-C to stop)...")
	return waitForLogin(ctx, c, cl, cn.cfg, p, lo)
}

// waitForLogin polls the login session until it is approved (then saves the key), expires or times out.
func waitForLogin(ctx context.Context, c *cobra.Command, cl *apiClient, cfg *cliConfig, p *pendingLogin, lo loginOpts) error {
	timeout := lo.timeout
	if timeout <= 0 {
		timeout = max(time.Until(p.ExpiresAt)+time.Minute, time.Minute)
	}
	pollCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	path := "/v1/cli/login/sessions/" + seg(p.SessionID) + "?poll_token=" + url.QueryEscape(p.PollToken)
	timedOut := func() error {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("timed out after %s waiting for login session %s to be approved", timeout, p.SessionID)
	}
	transient := 0
	for {
		wait := lo.interval
		var res api.CLILoginResult
		err := cl.do(pollCtx, http.MethodGet, path, nil, &res)
		switch {
		case err == nil:
			transient = 0
			switch res.State {
			case "completed", "authorized":
				return finishLogin(c, cfg, p, &res)
			case "expired":
				clearPending(cfg, p)
				return fmt.Errorf("login session %s expired before it was approved; run `appliance login` again", p.SessionID)
			case "refused":
				clearPending(cfg, p)
				return fmt.Errorf("login session %s was refused on the approval page; no key was issued", p.SessionID)
			case "pending":
			default:
				return fmt.Errorf("login session %s is in an unexpected state %q", p.SessionID, res.State)
			}
		case pollCtx.Err() != nil:
			return timedOut()
		case apiStatus(err) == http.StatusNotFound:
			clearPending(cfg, p)
			return fmt.Errorf("login session %s: %w", p.SessionID, err)
		default:
			after, retry := retryPoll(err, &transient)
			switch {
			case !retry:
				return fmt.Errorf("poll login session %s: %w", p.SessionID, err)
			case apiStatus(err) == http.StatusTooManyRequests:
				wait = max(wait, after)
				fmt.Fprintf(c.ErrOrStderr(), "Rate limited by the API; polling again in %s.\n", wait)
			default:
				fmt.Fprintf(c.ErrOrStderr(), "Polling failed (%v); trying again in %s.\n", err, wait)
			}
		}
		if err := sleepCtx(pollCtx, wait); err != nil {
			return timedOut()
		}
	}
}

// finishLogin saves the minted key with the API URL and CA in the CLI config.
func finishLogin(c *cobra.Command, cfg *cliConfig, p *pendingLogin, res *api.CLILoginResult) error {
	if res.PlaintextAPIKey == "" {
		clearPending(cfg, p)
		return fmt.Errorf("login session %s was approved but its key was already collected by another poll; run `appliance login` again", p.SessionID)
	}
	fail := func(err error) error {
		return fmt.Errorf("a key was minted for login session %s but could not be saved (revoke it with `appliance api-keys revoke` after logging in again): %w", p.SessionID, err)
	}
	caPath, err := saveCA(p.CACert)
	if err != nil {
		return fail(err)
	}
	cfg.APIURL, cfg.APIKey, cfg.CACert = p.APIURL, res.PlaintextAPIKey, caPath
	if cfg.PendingLogin != nil && cfg.PendingLogin.SessionID == p.SessionID {
		cfg.PendingLogin = nil
	}
	if err := saveConfig(cfg); err != nil {
		return fail(err)
	}
	path, _ := configPath()
	fmt.Fprintf(c.OutOrStdout(), "Logged in to organization %s (%s).\nThe API key and API URL are saved in %s.\n",
		firstNonEmpty(res.OrganizationName, "(unnamed)"), res.OrganizationID, path)
	return nil
}

// clearPending forgets a pending login that can no longer finish (best effort).
func clearPending(cfg *cliConfig, p *pendingLogin) {
	if cfg.PendingLogin != nil && cfg.PendingLogin.SessionID == p.SessionID {
		cfg.PendingLogin = nil
		_ = saveConfig(cfg)
	}
}

// ---- login approve ---------------------------------------------------------------------------------

func newLoginApproveCmd(o *clientOpts) *cobra.Command {
	var (
		email              = emailFlag()
		org                string
		passwordStdin, yes bool
		base               string // the login session's path
	)
	return newAPICmd(o, apiCmd[api.CLILoginDetails]{
		Use:   "approve SESSION_ID",
		Short: "Approve a device login as a signed-in user (mints the device's API key in your organization)",
		Long: `Sign in with your email and password, show the device login and approve it. The new API key goes to
the waiting device only; it is never shown here. The password is read from standard input with
--password-stdin, else from APPLIANCE_PASSWORD, else prompted for (without echo) on a terminal.`,
		Example: `  appliance login approve cli_0123... --api https://127.0.0.1:7443 --email you@example.com
  printf '%s\n' "$PASSWORD" | appliance login approve cli_0123... --email you@example.com --password-stdin`,
		Args: cobra.ExactArgs(1),
		Flags: func(f *pflag.FlagSet) {
			email.bind(f)
			f.StringVar(&org, "org", "", "organization to approve the login in (default: your first membership)")
			f.BoolVar(&passwordStdin, "password-stdin", false, "read the password from standard input")
			f.BoolVar(&yes, "yes", false, "approve without asking (asked only on a terminal)")
		},
		Validate: email.resolve,
		Client: func(x *call) (*apiClient, error) {
			password, err := readPassword(x.c, passwordStdin, email.value)
			if err != nil {
				return nil, err
			}
			return signIn(x, email.value, password, org)
		},
		Path: func(x *call) string {
			base = "/v1/cli/login/sessions/" + seg(x.args[0])
			return base + "/details"
		},
		Failed: func(x *call, err error) error { return fmt.Errorf("read login session %s: %w", x.args[0], err) },
		// The details shown, the user asked (on a terminal), the login is approved: a second call.
		Print: func(x *call, det *api.CLILoginDetails) error {
			sessionID := x.args[0]
			keyExp := "never"
			if det.KeyExpiresAt != nil {
				keyExp = det.KeyExpiresAt.Local().Format(time.RFC3339)
			}
			x.printf("Device login %s\n", det.SessionID)
			printFields(x.out(), "  %-15s%s\n", [][]string{
				{"code:", firstNonEmpty(det.UserCode, "-")},
				{"device:", firstNonEmpty(det.DeviceName, "(unnamed)")},
				{"key name:", det.KeyName},
				{"scopes:", strings.Join(det.Scopes, ", ")},
				{"key expires:", keyExp},
				{"login expires:", det.ExpiresAt.Local().Format(time.RFC3339)},
				{"state:", det.State},
			})
			if det.State != "pending" {
				return fmt.Errorf("login session %s is %s; only a pending login can be approved", sessionID, det.State)
			}
			if !yes && !passwordStdin {
				if f, ok := x.c.InOrStdin().(*os.File); ok && term.IsTerminal(int(f.Fd())) {
					fmt.Fprint(x.c.ErrOrStderr(), "Approve this device? It receives an API key with the scopes above. [y/N] ")
					line, _ := bufio.NewReader(f).ReadString('\n')
					if a := strings.ToLower(strings.TrimSpace(line)); a != "y" && a != "yes" {
						return errors.New("not approved")
					}
				}
			}
			var res api.CLILoginResult
			if err := x.cl.do(x.c.Context(), http.MethodPost, base+"/authorize", nil, &res); err != nil {
				return fmt.Errorf("approve login session %s: %w", sessionID, err)
			}
			return x.printf("Approved login session %s for organization %s (%s); state: %s.\nThe device receives its API key on its next poll.\n",
				res.SessionID, firstNonEmpty(res.OrganizationName, "(unnamed)"), res.OrganizationID, res.State)
		},
	})
}

// signIn opens a session of the built-in identity provider (in org, or the user's first membership) with
// the command's anonymous client and returns a client that uses it.
func signIn(x *call, email, password, org string) (*apiClient, error) {
	var sess api.SessionResult
	body := api.SessionRequest{Email: email, Password: password, OrganizationID: org}
	if err := x.cl.do(x.c.Context(), http.MethodPost, "/v1/auth/sessions", body, &sess); err != nil {
		return nil, fmt.Errorf("sign in as %s: %w", email, err)
	}
	return x.cl.withToken(sess.Token), nil
}

// readPassword takes the password from stdin (--password-stdin), APPLIANCE_PASSWORD, or a no-echo prompt.
func readPassword(c *cobra.Command, fromStdin bool, email string) (string, error) {
	if fromStdin {
		b, err := io.ReadAll(io.LimitReader(c.InOrStdin(), 64<<10))
		if err != nil {
			return "", fmt.Errorf("read password from stdin: %w", err)
		}
		pw := strings.TrimRight(string(b), "\r\n")
		if pw == "" {
			return "", errors.New("--password-stdin: standard input held no password")
		}
		return pw, nil
	}
	if pw := os.Getenv("APPLIANCE_PASSWORD"); pw != "" {
		return pw, nil
	}
	if f, ok := c.InOrStdin().(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		fmt.Fprintf(c.ErrOrStderr(), "Password for %s: ", email)
		b, err := term.ReadPassword(int(f.Fd()))
		fmt.Fprintln(c.ErrOrStderr())
		if err != nil {
			return "", fmt.Errorf("read password: %w", err)
		}
		if len(b) == 0 {
			return "", errors.New("empty password")
		}
		return string(b), nil
	}
	return "", errors.New("no password: pipe it in with --password-stdin, set APPLIANCE_PASSWORD, or run in a terminal to be prompted")
}
