package cmd

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/theappliance/appliance/api"
)

// The platform operators' organization commands: each signs in as the operator (--email, the password from
// --password-stdin, APPLIANCE_PASSWORD or a prompt), since the routes take an operator's session, never a key.
var _ = registerClientGroup("orgs", []string{"organizations"}, "Platform operators: create, list, suspend, resume and delete organizations, set their quotas (signs in as you)",
	newOrgsListCmd, newOrgsCreateCmd, newOrgsSuspendCmd, newOrgsResumeCmd, newOrgsDeleteCmd, newOrgsQuotaCmd)

const orgsPath = "/v1/organizations"

func newOrgsListCmd(o *clientOpts) *cobra.Command {
	return signedInCmd(o, apiCmd[api.OrganizationList]{
		Use: "list", Aliases: []string{"ls"}, Short: "List every organization with its projects and members", JSON: true,
		Example: `  appliance orgs list --email operator@example.com`,
		Path:    func(*call) string { return orgsPath },
		Columns: []string{"ID", "SLUG", "NAME", "PROJECTS", "MEMBERS", "QUOTA", "SUSPENDED", "CREATED"},
		Rows: func(l *api.OrganizationList) [][]string {
			return rowsOf(l.Organizations, func(org api.OrganizationSummary) []string {
				suspended := "-"
				if org.SuspendedAt != nil {
					suspended = stamp(*org.SuspendedAt) + ": " + org.SuspendedReason
				}
				quota := fmt.Sprintf("%d projects, %d previews, %s", org.Quota.ProjectsLimit, org.Quota.PreviewsLimit, humanBytes(org.Quota.StorageLimitBytes))
				return []string{org.ID, org.Slug, org.Name, strconv.Itoa(org.ProjectCount), strconv.Itoa(org.MemberCount), quota, suspended, stamp(org.CreatedAt)}
			})
		},
	})
}

func newOrgsCreateCmd(o *clientOpts) *cobra.Command {
	var req api.CreateOrganizationRequest
	return signedInCmd(o, apiCmd[api.CreatedOrganization]{
		Use:   "create NAME",
		Short: "Create an organization, with its first owner (--owner)",
		Long: `Create an organization. --owner names its first owner: an existing user joins it as owner; a new
email creates a user whose generated password is printed once, alone on standard output.`,
		Example: `  appliance orgs create "Acme Corp" --owner dana@acme.example --email operator@example.com`,
		Args:    cobra.ExactArgs(1), JSON: true, Method: http.MethodPost,
		Flags: func(f *pflag.FlagSet) {
			f.StringVar(&req.Slug, "slug", "", "URL slug (default: made from the name)")
			f.StringVar(&req.OwnerEmail, "owner", "", "email of the organization's first owner")
		},
		Path: func(*call) string { return orgsPath },
		Body: func(x *call) any { req.Name = x.args[0]; return &req },
		Print: func(x *call, r *api.CreatedOrganization) error {
			errw := x.c.ErrOrStderr()
			fmt.Fprintf(errw, "Created organization %s (%s, slug %s).\n", r.Organization.Name, r.Organization.ID, r.Organization.Slug)
			if r.Owner == nil {
				fmt.Fprintf(errw, "It has no member yet: add its owner with POST /v1/organizations/%s/members, or create it with --owner.\n", r.Organization.ID)
				return nil
			}
			fmt.Fprintf(errw, "Owner: %s (%s).\n", r.Owner.Email, r.Owner.UserID)
			if r.InitialPassword != "" {
				fmt.Fprintln(errw, "Their initial password follows; it is shown only this once. Hand it over safely; they should change it.")
				fmt.Fprintln(x.out(), r.InitialPassword)
			}
			return nil
		},
	})
}

// printOrgJobs tells what a suspend or resume did.
func printOrgJobs(x *call, r *api.OrganizationJobs, what string) error {
	ids := make([]string, len(r.Jobs))
	for i, j := range r.Jobs {
		ids[i] = j.ID
	}
	list := ""
	if len(ids) > 0 {
		list = ": " + strings.Join(ids, ", ")
	}
	return x.printf("Organization %s %s; %d project job(s)%s (appliance jobs get ID).\n", r.Organization.ID, what, len(r.Jobs), list)
}

func newOrgsSuspendCmd(o *clientOpts) *cobra.Command {
	var req api.SuspendOrganizationRequest
	return signedInCmd(o, apiCmd[api.OrganizationJobs]{
		Use:     "suspend ORG_ID --reason TEXT",
		Short:   "Suspend an organization: its keys and sessions are refused at once and its servers stopped (data kept)",
		Example: `  appliance orgs suspend org_... --reason "unpaid invoice" --email operator@example.com`,
		Args:    cobra.ExactArgs(1), JSON: true, Method: http.MethodPost,
		Flags: func(f *pflag.FlagSet) {
			f.StringVar(&req.Reason, "reason", "", "why (required): the organization's callers read it in every refusal")
		},
		Validate: func(*call) error {
			if strings.TrimSpace(req.Reason) == "" {
				return errors.New("--reason is required")
			}
			return nil
		},
		Path: func(x *call) string { return orgsPath + "/" + seg(x.args[0]) + "/suspend" },
		Body: func(*call) any { return &req },
		Print: func(x *call, r *api.OrganizationJobs) error {
			return printOrgJobs(x, r, "suspended ("+r.Organization.SuspendedReason+")")
		},
	})
}

func newOrgsResumeCmd(o *clientOpts) *cobra.Command {
	return signedInCmd(o, apiCmd[api.OrganizationJobs]{
		Use: "resume ORG_ID", Short: "Resume a suspended organization: its keys and sessions work again and its servers start",
		Args: cobra.ExactArgs(1), JSON: true, Method: http.MethodPost,
		Path:  func(x *call) string { return orgsPath + "/" + seg(x.args[0]) + "/resume" },
		Print: func(x *call, r *api.OrganizationJobs) error { return printOrgJobs(x, r, "resumed") },
	})
}

func newOrgsDeleteCmd(o *clientOpts) *cobra.Command {
	return signedInCmd(o, apiCmd[api.DeletedOrganization]{
		Use: "delete ORG_ID", Aliases: []string{"rm"}, Args: cobra.ExactArgs(1), JSON: true, Method: http.MethodDelete,
		Short:       "Delete an organization with no project left (its keys are revoked, its memberships end)",
		Confirm:     "delete the organization",
		Unconfirmed: "deleting an organization revokes its API keys and ends its memberships, with no undo",
		Path:        func(x *call) string { return orgsPath + "/" + seg(x.args[0]) },
		Print: func(x *call, r *api.DeletedOrganization) error {
			return x.printf("Deleted organization %s: revoked %d API key(s), ended %d membership(s).\n", x.args[0], len(r.RevokedAPIKeys), r.RemovedMembers)
		},
	})
}
