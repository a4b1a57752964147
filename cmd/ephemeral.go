package cmd

import (
	"fmt"
	"net/http"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/theappliance/appliance/api"
)

var _ = registerClientGroup("ephemeral", nil, "Throwaway databases that need no account (destroyed after 72 hours unless claimed)",
	newEphemeralCreateCmd, newEphemeralGetCmd, newEphemeralDeleteCmd, newEphemeralClaimCmd)

func ephemeralPath(id string) string { return "/v1/ephemeral-databases/" + seg(id) }

// needEphemeral is the Need of an answer holding an ephemeral database.
func needEphemeral(db *api.EphemeralDatabase) string {
	return missing(db == nil, "ephemeral database")
}

func newEphemeralCreateCmd(o *clientOpts) *cobra.Command {
	var name string
	var noWait bool
	return newAPICmd(o, apiCmd[api.EphemeralCreated]{
		Use:   "create",
		Short: "Make a throwaway database and print its connection string (no login needed)",
		Example: `  psql "$(appliance ephemeral create --api https://127.0.0.1:7443 --ca-cert ca.crt)"
  appliance ephemeral claim <project id> --token eph_...   # keep it: move it into your organization`,
		Flags: func(f *pflag.FlagSet) {
			f.StringVar(&name, "name", "", "its name (default: generated)")
			f.BoolVar(&noWait, "no-wait", false, "print the project id at once instead of waiting for the connection string")
		},
		Anonymous: true, Method: http.MethodPost,
		Path: func(*call) string { return "/v1/ephemeral-databases" },
		Body: func(*call) any { return api.CreateEphemeralRequest{Name: name} },
		Need: func(r *api.EphemeralCreated) string { return needEphemeral(r.EphemeralDatabase) },
		Print: func(x *call, res *api.EphemeralCreated) error {
			db, w := res.EphemeralDatabase, x.c.ErrOrStderr()
			fmt.Fprintf(w, "Ephemeral database %s (%s), destroyed at %s unless claimed.\n", db.ProjectID, db.Name, db.ExpiresAt.Format(time.RFC3339))
			fmt.Fprintf(w, "Claim token (shown once): %s\n", res.ClaimToken)
			// The link whole: its #token= fragment is what the claim page claims with (browsers never send it).
			fmt.Fprintf(w, "Keep it: appliance ephemeral claim %s --token <claim token>, or open in a signed-in browser:\n  %s\n", db.ProjectID, res.ClaimURL)
			if noWait {
				fmt.Fprintln(x.out(), db.ProjectID)
				return nil
			}
			// Until it is active: a spare cluster makes that a fraction of a second, initdb a few seconds.
			get := x.cl.withHeader("X-Service-Claim-Token", res.ClaimToken)
			deadline := time.Now().Add(2 * time.Minute)
			for {
				var cur api.EphemeralResponse
				if err := get.do(x.c.Context(), http.MethodGet, ephemeralPath(db.ProjectID), nil, &cur); err != nil {
					return err
				}
				switch {
				case cur.Connections != nil:
					fmt.Fprintln(x.out(), cur.Connections.DirectURL)
					return nil
				case cur.EphemeralDatabase == nil:
					return fmt.Errorf("GET %s: unexpected response: no ephemeral database", ephemeralPath(db.ProjectID))
				case cur.EphemeralDatabase.State == api.ProjectFailed:
					return fmt.Errorf("ephemeral database %s failed to provision", db.ProjectID)
				case time.Now().After(deadline):
					return fmt.Errorf("ephemeral database %s is still %s after 2 minutes", db.ProjectID, cur.EphemeralDatabase.State)
				}
				if err := sleepCtx(x.c.Context(), 50*time.Millisecond); err != nil {
					return err
				}
			}
		},
	})
}

// claimTokenCmd is the description of a command that sends an ephemeral database's claim token
// (--token or APPLIANCE_CLAIM_TOKEN); with header it goes in X-Service-Claim-Token, with an anonymous
// client. token is where the command finds it.
func claimTokenCmd[Res any](s apiCmd[Res], token *envFlag, header bool) apiCmd[Res] {
	*token = envFlag{name: "token", env: "APPLIANCE_CLAIM_TOKEN", usage: "the claim token (APPLIANCE_CLAIM_TOKEN)",
		required: "the claim token is required: --token eph_... or APPLIANCE_CLAIM_TOKEN (ephemeral create printed it)"}
	s.Flags, s.Validate = token.bind, token.resolve
	if header {
		s.Anonymous = true
		s.Prepare = func(x *call) error {
			x.cl = x.cl.withHeader("X-Service-Claim-Token", token.value)
			return nil
		}
	}
	return s
}

func newEphemeralGetCmd(o *clientOpts) *cobra.Command {
	var token envFlag
	return newAPICmd(o, claimTokenCmd(apiCmd[api.EphemeralResponse]{
		Use: "get PROJECT_ID", Short: "Show an ephemeral database and its connection string (with its claim token)",
		Args: cobra.ExactArgs(1), JSON: true,
		Path: func(x *call) string { return ephemeralPath(x.args[0]) },
		Need: func(r *api.EphemeralResponse) string { return needEphemeral(r.EphemeralDatabase) },
		Print: func(x *call, res *api.EphemeralResponse) error {
			db := res.EphemeralDatabase
			x.printf("%s (%s): %s, destroyed at %s unless claimed\n", db.ProjectID, db.Name, db.State, db.ExpiresAt.Format(time.RFC3339))
			if res.Connections != nil {
				fmt.Fprintln(x.out(), res.Connections.DirectURL)
			}
			return nil
		},
	}, &token, true))
}

func newEphemeralDeleteCmd(o *clientOpts) *cobra.Command {
	var token envFlag
	return newAPICmd(o, claimTokenCmd(apiCmd[api.JobResponse]{
		Use: "delete PROJECT_ID", Short: "Destroy an ephemeral database now (with its claim token)", Args: cobra.ExactArgs(1),
		Method: http.MethodDelete,
		Path:   func(x *call) string { return ephemeralPath(x.args[0]) },
		Need:   func(r *api.JobResponse) string { return missing(r.Job == nil, "job") },
		Print: func(x *call, r *api.JobResponse) error {
			return x.printf("Destroying ephemeral database %s: job %s.\n", x.args[0], r.Job.ID)
		},
	}, &token, true))
}

func newEphemeralClaimCmd(o *clientOpts) *cobra.Command {
	var token envFlag
	return newAPICmd(o, claimTokenCmd(apiCmd[api.ClaimResponse]{
		Use:   "claim PROJECT_ID",
		Short: "Move an ephemeral database into your organization as a normal project (its data and URLs stay)",
		Args:  cobra.ExactArgs(1), Method: http.MethodPost,
		Path: func(x *call) string { return ephemeralPath(x.args[0]) + "/claim" },
		Body: func(*call) any { return api.ClaimRequest{ClaimToken: token.value} },
		Print: func(x *call, r *api.ClaimResponse) error {
			return x.printf("Claimed %s (%s) into organization %s: it is a project now and is kept until deleted.\n",
				r.Project.ID, r.Project.Name, r.Project.OrganizationID)
		},
	}, &token, false))
}
