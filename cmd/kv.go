package cmd

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/theappliance/appliance/api"
)

var _ = registerClientGroup("kv", []string{"redis"}, "Manage a project's key-value store (Redis over TLS, and Upstash's REST protocol)",
	newKVCreateCmd, newKVGetCmd, newKVCredentialsCmd, newKVRotateCmd, newKVFlushCmd, newKVDeleteCmd, newKVCLICmd)

func kvPath(projectID string) string { return projectPath(projectID) + "/kv" }

// printKVToken prints a token the API returns once: alone on stdout (TOKEN=$(appliance kv create …)), and
// how to use it on stderr.
func printKVToken(c *cobra.Command, kv *api.KVStore) {
	if kv.Token == nil {
		return
	}
	tok := *kv.Token
	fmt.Fprintln(c.OutOrStdout(), tok)
	w := c.ErrOrStderr()
	fmt.Fprintf(w, "This is the only time the token is shown: the appliance keeps only its hash.\n")
	fmt.Fprintf(w, "  redis-cli:  APPLIANCE_KV_TOKEN=<token> appliance kv cli %s\n", kv.ProjectID)
	fmt.Fprintf(w, "  clients:    redis_url %s (with the token as the password of user default)\n",
		strings.Replace(kv.Credentials.RedisURL, tok, "<token>", 1))
	fmt.Fprintf(w, "  REST:       UPSTASH_REDIS_REST_URL=%s UPSTASH_REDIS_REST_TOKEN=<token>\n", kv.Credentials.RESTURL)
}

func newKVCreateCmd(o *clientOpts) *cobra.Command {
	return newAPICmd(o, apiCmd[api.KVCreateResponse]{
		Use:   "create PROJECT_ID",
		Short: "Create the project's key-value store (prints its token once)",
		Example: `  appliance kv create prj_... --wait
  appliance kv cli prj_... --token kv_...`,
		Args: cobra.ExactArgs(1), OwnJSON: "print the API's JSON answer",
		Method: http.MethodPost,
		Path:   func(x *call) string { return kvPath(x.args[0]) },
		Need: func(r *api.KVCreateResponse) string {
			return missing(r.Job == nil || r.KVStore == nil, "job or store")
		},
		Wait: "wait until the store's server runs",
		// Standard output holds the token alone (or the JSON answer): the rest goes to standard error.
		Print: func(x *call, res *api.KVCreateResponse) error {
			c := x.c
			if x.json {
				if err := printJSON(c.OutOrStdout(), x.raw); err != nil {
					return err
				}
			} else {
				fmt.Fprintf(c.ErrOrStderr(), "Creating key-value store %s of %s: job %s (%s).\n", res.KVStore.ID, x.args[0], res.Job.ID, res.Job.Type)
				printKVToken(c, res.KVStore)
			}
			if !x.wait {
				return nil
			}
			c.SetOut(c.ErrOrStderr())
			if _, err := waitJob(c, x.cl, res.Job); err != nil {
				return err
			}
			if !x.json {
				fmt.Fprintf(c.ErrOrStderr(), "Key-value store %s is running.\n", res.KVStore.ID)
			}
			return nil
		},
	})
}

func newKVGetCmd(o *clientOpts) *cobra.Command {
	return newAPICmd(o, apiCmd[api.KVStore]{
		Use: "get PROJECT_ID", Short: "Show the project's key-value store", Args: cobra.ExactArgs(1), JSON: true,
		Path: func(x *call) string { return kvPath(x.args[0]) },
		Print: func(x *call, kv *api.KVStore) error {
			return writeTable(x.out(), nil, [][]string{{"ID", kv.ID}, {"STATE", kv.State}, opt("LAST ERROR", kv.LastError),
				{"MEMORY", fmt.Sprintf("%d MB (%s)", kv.MaxmemoryMB, kv.MaxmemoryPolicy)}, {"PERSISTENCE", kv.Persistence},
				{"TOKEN", kv.TokenPrefix + "… (shown only at create and rotate-token)"}, {"RESP", kv.Credentials.RedisURL},
				{"REST", kv.Credentials.RESTURL}, {"CREATED", stamp(kv.CreatedAt)}})
		},
	})
}

func newKVCredentialsCmd(o *clientOpts) *cobra.Command {
	return newAPICmd(o, apiCmd[api.KVCredentials]{
		Use: "credentials PROJECT_ID", Args: cobra.ExactArgs(1), JSON: true,
		Short: "Show how to connect (the token itself is shown only at create and rotate-token)",
		Path:  func(x *call) string { return kvPath(x.args[0]) + "/credentials" },
		Print: func(x *call, cr *api.KVCredentials) error {
			return writeTable(x.out(), nil, [][]string{{"redis_host", cr.RedisHost}, {"redis_port", strconv.Itoa(cr.RedisPort)},
				{"redis_url", cr.RedisURL}, {"rest_url", cr.RESTURL},
				{"token", "not shown: only its hash is kept (appliance kv rotate-token " + x.args[0] + " mints a new one)"}})
		},
	})
}

func newKVRotateCmd(o *clientOpts) *cobra.Command {
	return newAPICmd(o, apiCmd[api.KVStoreResult]{
		Use: "rotate-token PROJECT_ID --confirm", Args: cobra.ExactArgs(1), JSON: true,
		Short:       "Mint a new token (printed once); the old one and its connections are cut at once",
		Confirm:     "confirm that the current token stops working",
		Unconfirmed: "the current token stops working at once and its connections are closed",
		Method:      http.MethodPost,
		Path:        func(x *call) string { return kvPath(x.args[0]) + "/rotate-token" },
		Need:        func(r *api.KVStoreResult) string { return missing(r.KVStore == nil, "store") },
		Print: func(x *call, r *api.KVStoreResult) error {
			fmt.Fprintf(x.c.ErrOrStderr(), "Rotated the token of key-value store %s: the old one no longer works.\n", r.KVStore.ID)
			printKVToken(x.c, r.KVStore)
			return nil
		},
	})
}

// kvJobCmd is flush or delete: a confirmed job on the project's store.
func kvJobCmd(o *clientOpts, use, short, method, suffix, warning, what string) *cobra.Command {
	return jobCmd(o, apiCmd[api.JobResponse]{
		Use: use + " PROJECT_ID --confirm", Short: short, Method: method,
		Confirm: "confirm: this has no undo", Unconfirmed: warning,
		Wait: "wait until the job ends",
	}, kvPath, suffix, what+" the key-value store of %s")
}

func newKVFlushCmd(o *clientOpts) *cobra.Command {
	return kvJobCmd(o, "flush", "Delete every key (no undo); the endpoint and token stay", http.MethodPost, "/flush",
		"flush deletes every key of the store, with no undo", "Flushing")
}

func newKVDeleteCmd(o *clientOpts) *cobra.Command {
	return kvJobCmd(o, "delete", "Delete the store: its server and every key (the project is untouched)", http.MethodDelete, "",
		"delete removes the store and every key, with no undo", "Deleting")
}

// newKVCLICmd runs redis-cli against the store's RESP front with TLS verified against the CA the CLI
// trusts; the token goes to redis-cli through REDISCLI_AUTH, never on its command line.
func newKVCLICmd(o *clientOpts) *cobra.Command {
	var (
		token = envFlag{name: "token", env: "APPLIANCE_KV_TOKEN", usage: "the store's token (APPLIANCE_KV_TOKEN)",
			required: "the store's token is required: --token kv_... or APPLIANCE_KV_TOKEN (it was printed by kv create or kv rotate-token)"}
		prog string
	)
	return newAPICmd(o, apiCmd[api.KVCredentials]{
		Use:   "cli PROJECT_ID [-- REDIS_CLI_ARGS...]",
		Short: "Open redis-cli on the store (TLS verified; the token from --token or APPLIANCE_KV_TOKEN)",
		Example: `  APPLIANCE_KV_TOKEN=kv_... appliance kv cli prj_...
  appliance kv cli prj_... --token kv_... -- GET greeting`,
		Args:  cobra.MinimumNArgs(1),
		Flags: token.bind,
		Validate: func(x *call) (err error) {
			if err := token.resolve(x); err != nil {
				return err
			}
			if prog, err = exec.LookPath("redis-cli"); err != nil {
				return errors.New("redis-cli is not installed (Debian package redis-tools)")
			}
			return nil
		},
		Path: func(x *call) string { return kvPath(x.args[0]) + "/credentials" },
		Print: func(x *call, cr *api.KVCredentials) error {
			cliArgs := []string{"--tls", "-h", cr.RedisHost, "-p", strconv.Itoa(cr.RedisPort)}
			if caFile := x.cl.caCert; caFile != "" {
				if strings.Contains(caFile, "-----BEGIN") { // inline PEM: redis-cli needs a file
					f, err := os.CreateTemp("", "appliance-ca-*.crt")
					if err != nil {
						return err
					}
					defer os.Remove(f.Name())
					if _, err := f.WriteString(caFile); err != nil {
						return err
					}
					f.Close()
					caFile = f.Name()
				}
				cliArgs = append(cliArgs, "--cacert", caFile)
			}
			run := exec.CommandContext(x.c.Context(), prog, append(cliArgs, x.args[1:]...)...)
			run.Env = append(os.Environ(), "REDISCLI_AUTH="+token.value)
			run.Stdin, run.Stdout, run.Stderr = x.c.InOrStdin(), x.out(), x.c.ErrOrStderr()
			return run.Run()
		},
	})
}
