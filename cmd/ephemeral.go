package cmd

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/theappliance/appliance/appliance"
)

var _ = registerClientCommand(newEphemeralCmd)

func newEphemeralCmd(o *clientOpts) *cobra.Command {
	return groupCmd("ephemeral", nil, "Throwaway databases that need no account (destroyed after 72 hours unless claimed)",
		newEphemeralCreateCmd(o), newEphemeralGetCmd(o), newEphemeralDeleteCmd(o), newEphemeralClaimCmd(o))
}

func ephemeralPath(id string) string { return "/v1/ephemeral-databases/" + seg(id) }

// claimToken is --token, else APPLIANCE_CLAIM_TOKEN.
func claimToken(flag string) (string, error) {
	if t := firstNonEmpty(flag, os.Getenv("APPLIANCE_CLAIM_TOKEN")); t != "" {
		return t, nil
	}
	return "", errors.New("the claim token is required: --token eph_... or APPLIANCE_CLAIM_TOKEN (ephemeral create printed it)")
}

// anonymousClient is a client of the API with no credential (the API URL and CA as every command resolves
// them; no login needed).
func (o *clientOpts) anonymousClient() (*apiClient, error) {
	cn, err := o.resolve()
	if err != nil {
		return nil, err
	}
	return cn.anonymous()
}

func newEphemeralCreateCmd(o *clientOpts) *cobra.Command {
	var name string
	var noWait bool
	cmd := &cobra.Command{
		Use:   "create",
		Short: "Make a throwaway database and print its connection string (no login needed)",
		Example: `  psql "$(appliance ephemeral create --api https://127.0.0.1:7443 --ca-cert ca.crt)"
  appliance ephemeral claim <project id> --token eph_...   # keep it: move it into your organization`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			cl, err := o.anonymousClient()
			if err != nil {
				return err
			}
			var res appliance.EphemeralCreated
			if err := cl.do(c.Context(), http.MethodPost, "/v1/ephemeral-databases", appliance.CreateEphemeralRequest{Name: name}, &res); err != nil {
				return err
			}
			db := res.EphemeralDatabase
			w := c.ErrOrStderr()
			fmt.Fprintf(w, "Ephemeral database %s (%s), destroyed at %s unless claimed.\n", db.ProjectID, db.Name, db.ExpiresAt.Format(time.RFC3339))
			fmt.Fprintf(w, "Claim token (shown once): %s\n", res.ClaimToken)
			fmt.Fprintf(w, "Keep it: appliance ephemeral claim %s --token <claim token>, or open %s\n", db.ProjectID, strings.SplitN(res.ClaimURL, "#", 2)[0])
			if noWait {
				fmt.Fprintln(c.OutOrStdout(), db.ProjectID)
				return nil
			}
			// Until it is active: a spare cluster makes that a fraction of a second, initdb a few seconds.
			get := cl.withHeader("X-Service-Claim-Token", res.ClaimToken)
			deadline := time.Now().Add(2 * time.Minute)
			for {
				var cur appliance.EphemeralResponse
				if err := get.do(c.Context(), http.MethodGet, ephemeralPath(db.ProjectID), nil, &cur); err != nil {
					return err
				}
				switch {
				case cur.Connections != nil:
					fmt.Fprintln(c.OutOrStdout(), cur.Connections.DirectURL)
					return nil
				case cur.EphemeralDatabase.State == appliance.ProjectFailed:
					return fmt.Errorf("ephemeral database %s failed to provision", db.ProjectID)
				case time.Now().After(deadline):
					return fmt.Errorf("ephemeral database %s is still %s after 2 minutes", db.ProjectID, cur.EphemeralDatabase.State)
				}
				if err := sleepCtx(c.Context(), 50*time.Millisecond); err != nil {
					return err
				}
			}
		},
	}
	cmd.Flags().StringVar(&name, "name", "", "its name (default: generated)")
	cmd.Flags().BoolVar(&noWait, "no-wait", false, "print the project id at once instead of waiting for the connection string")
	return cmd
}

func newEphemeralGetCmd(o *clientOpts) *cobra.Command {
	var token string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "get PROJECT_ID",
		Short: "Show an ephemeral database and its connection string (with its claim token)",
		Args:  cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			tok, err := claimToken(token)
			if err != nil {
				return err
			}
			cl, err := o.anonymousClient()
			if err != nil {
				return err
			}
			raw, err := cl.withHeader("X-Service-Claim-Token", tok).doRaw(c.Context(), http.MethodGet, ephemeralPath(args[0]), nil)
			if err != nil {
				return err
			}
			var res appliance.EphemeralResponse
			return kvJSONOr(c, raw, asJSON, http.MethodGet, ephemeralPath(args[0]), &res, func() {
				db := res.EphemeralDatabase
				fmt.Fprintf(c.OutOrStdout(), "%s (%s): %s, destroyed at %s unless claimed\n", db.ProjectID, db.Name, db.State, db.ExpiresAt.Format(time.RFC3339))
				if res.Connections != nil {
					fmt.Fprintln(c.OutOrStdout(), res.Connections.DirectURL)
				}
			})
		},
	}
	cmd.Flags().StringVar(&token, "token", "", "the claim token (APPLIANCE_CLAIM_TOKEN)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the API's JSON answer")
	return cmd
}

func newEphemeralDeleteCmd(o *clientOpts) *cobra.Command {
	var token string
	cmd := &cobra.Command{
		Use:   "delete PROJECT_ID",
		Short: "Destroy an ephemeral database now (with its claim token)",
		Args:  cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			tok, err := claimToken(token)
			if err != nil {
				return err
			}
			cl, err := o.anonymousClient()
			if err != nil {
				return err
			}
			var res appliance.JobResponse
			if err := cl.withHeader("X-Service-Claim-Token", tok).do(c.Context(), http.MethodDelete, ephemeralPath(args[0]), nil, &res); err != nil {
				return err
			}
			fmt.Fprintf(c.OutOrStdout(), "Destroying ephemeral database %s: job %s.\n", args[0], res.Job.ID)
			return nil
		},
	}
	cmd.Flags().StringVar(&token, "token", "", "the claim token (APPLIANCE_CLAIM_TOKEN)")
	return cmd
}

func newEphemeralClaimCmd(o *clientOpts) *cobra.Command {
	var token string
	cmd := &cobra.Command{
		Use:   "claim PROJECT_ID",
		Short: "Move an ephemeral database into your organization as a normal project (its data and URLs stay)",
		Args:  cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			tok, err := claimToken(token)
			if err != nil {
				return err
			}
			cl, err := o.authed()
			if err != nil {
				return err
			}
			var res appliance.ClaimResponse
			if err := cl.do(c.Context(), http.MethodPost, ephemeralPath(args[0])+"/claim", appliance.ClaimRequest{ClaimToken: tok}, &res); err != nil {
				return err
			}
			fmt.Fprintf(c.OutOrStdout(), "Claimed %s (%s) into organization %s: it is a project now and is kept until deleted.\n",
				res.Project.ID, res.Project.Name, res.Project.OrganizationID)
			return nil
		},
	}
	cmd.Flags().StringVar(&token, "token", "", "the claim token (APPLIANCE_CLAIM_TOKEN)")
	return cmd
}
