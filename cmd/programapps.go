package cmd

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/theappliance/appliance/api"
)

// The platform operators' program commands: the service tokens of the public website, and the review of
// the program applications it submits. Each signs in as the operator (--email, the password from
// --password-stdin, APPLIANCE_PASSWORD or a prompt), since the routes take an operator's session.
var _ = registerClientGroup("service-tokens", nil, "Platform operators: the public website's service tokens, which submit program applications and nothing else (signs in as you)",
	newServiceTokensCreateCmd, newServiceTokensListCmd, newServiceTokensRevokeCmd)

var _ = registerClientGroup("program-applications", []string{"applications"}, "Platform operators: review program applications (list, get, approve with a discount, reject; signs in as you)",
	newApplicationsListCmd, newApplicationsGetCmd, newApplicationsApproveCmd, newApplicationsRejectCmd)

const (
	serviceTokensPath = "/v1/service-tokens"
	applicationsPath  = "/v1/program-applications"
)

func newServiceTokensCreateCmd(o *clientOpts) *cobra.Command {
	return signedInCmd(o, apiCmd[api.CreatedServiceToken]{
		Use:   "create NAME",
		Short: "Mint a service token for the public website (scope program_applications:create only)",
		Long: `Mint a service token: the public website submits program applications with it (POST
/v1/program-applications, Authorization: Bearer svc_...), and it is refused everywhere else. The token is
printed once, alone on standard output; only its hash is kept.`,
		Example: `  appliance service-tokens create "www.example.com" --email operator@example.com`,
		Args:    cobra.ExactArgs(1), JSON: true, Method: http.MethodPost,
		Path: func(*call) string { return serviceTokensPath },
		Body: func(x *call) any { return &api.CreateServiceTokenRequest{Name: x.args[0]} },
		Print: func(x *call, r *api.CreatedServiceToken) error {
			fmt.Fprintf(x.c.ErrOrStderr(), "Minted service token %s (%s). It follows; it is shown only this once.\n", r.ServiceToken.ID, r.ServiceToken.Name)
			return x.printf("%s\n", r.PlaintextToken)
		},
	})
}

func newServiceTokensListCmd(o *clientOpts) *cobra.Command {
	return signedInCmd(o, apiCmd[api.ServiceTokenList]{
		Use: "list", Aliases: []string{"ls"}, Short: "List the service tokens, revoked ones too", JSON: true,
		Path:    func(*call) string { return serviceTokensPath },
		Columns: []string{"ID", "NAME", "PREFIX", "ACTIVE", "LAST USED", "CREATED"},
		Rows: func(l *api.ServiceTokenList) [][]string {
			return rowsOf(l.ServiceTokens, func(t *api.ServiceToken) []string {
				return []string{t.ID, t.Name, t.TokenPrefix, strconv.FormatBool(t.IsActive), timeOr(t.LastUsedAt, "-"), stamp(t.CreatedAt)}
			})
		},
	})
}

func newServiceTokensRevokeCmd(o *clientOpts) *cobra.Command {
	return signedInCmd(o, apiCmd[api.ServiceTokenResponse]{
		Use: "revoke TOKEN_ID", Short: "Revoke a service token: it authenticates no more",
		Args: cobra.ExactArgs(1), JSON: true, Method: http.MethodDelete,
		Path: func(x *call) string { return serviceTokensPath + "/" + seg(x.args[0]) },
		Print: func(x *call, r *api.ServiceTokenResponse) error {
			return x.printf("Revoked service token %s (%s).\n", r.ServiceToken.ID, r.ServiceToken.Name)
		},
	})
}

func newApplicationsListCmd(o *clientOpts) *cobra.Command {
	var status string
	return signedInCmd(o, apiCmd[api.ProgramApplicationList]{
		Use: "list", Aliases: []string{"ls"}, Short: "List program applications, newest first", JSON: true,
		Example: `  appliance program-applications list --status received --email operator@example.com`,
		Flags: func(f *pflag.FlagSet) {
			f.StringVar(&status, "status", "", "only received, approved or rejected applications")
		},
		Path: func(*call) string {
			if status == "" {
				return applicationsPath
			}
			return applicationsPath + "?" + url.Values{"status": {status}}.Encode()
		},
		Columns: []string{"ID", "STATUS", "PROGRAM", "COMPANY", "EMAIL", "TEAM", "DISCOUNT CODE", "CREATED"},
		Rows: func(l *api.ProgramApplicationList) [][]string {
			return rowsOf(l.ProgramApplications, func(a *api.ProgramApplication) []string {
				return []string{a.ID, a.Status, a.Program, a.CompanyName, a.Email, strconv.Itoa(a.TeamSize), orDash(a.DiscountCode), stamp(a.CreatedAt)}
			})
		},
	})
}

func newApplicationsGetCmd(o *clientOpts) *cobra.Command {
	return signedInCmd(o, apiCmd[api.ProgramApplicationResponse]{
		Use: "get APPLICATION_ID", Short: "Show a program application", Args: cobra.ExactArgs(1), JSON: true,
		Path: func(x *call) string { return applicationsPath + "/" + seg(x.args[0]) },
		Print: func(x *call, r *api.ProgramApplicationResponse) error {
			return printApplication(x, r.ProgramApplication)
		},
	})
}

func newApplicationsApproveCmd(o *clientOpts) *cobra.Command {
	var req api.ApproveProgramApplicationRequest
	return signedInCmd(o, apiCmd[api.ProgramApplicationResponse]{
		Use:   "approve APPLICATION_ID --percent-off N",
		Short: "Approve an application: a discount (a coupon and its promotion code) is made at the billing provider",
		Long: `Approve a received application. The billing provider makes a coupon of --percent-off for
--duration-months (0: the first invoice only) and a promotion code (--code, or one it makes up) the applicant
redeems once at checkout; both are recorded on the application. Billing off: refused (409).`,
		Example: `  appliance program-applications approve pap_... --percent-off 50 --duration-months 12 --code ACME50 --email operator@example.com`,
		Args:    cobra.ExactArgs(1), JSON: true, Method: http.MethodPost,
		Flags: func(f *pflag.FlagSet) {
			f.Float64Var(&req.PercentOff, "percent-off", 0, "the discount, above 0 and at most 100 (required)")
			f.IntVar(&req.DurationMonths, "duration-months", 0, "months it applies (0: the first invoice only)")
			f.StringVar(&req.Code, "code", "", "the promotion code (default: made up by the provider)")
			f.StringVar(&req.OperatorNote, "note", "", "the operator's note")
		},
		Validate: func(*call) error {
			if req.PercentOff <= 0 {
				return errors.New("--percent-off is required (above 0, at most 100)")
			}
			return nil
		},
		Path: func(x *call) string { return applicationsPath + "/" + seg(x.args[0]) + "/approve" },
		Body: func(*call) any { return &req },
		Print: func(x *call, r *api.ProgramApplicationResponse) error {
			return printApplication(x, r.ProgramApplication)
		},
	})
}

func newApplicationsRejectCmd(o *clientOpts) *cobra.Command {
	var req api.RejectProgramApplicationRequest
	return signedInCmd(o, apiCmd[api.ProgramApplicationResponse]{
		Use: "reject APPLICATION_ID [--note TEXT]", Short: "Reject an application",
		Args: cobra.ExactArgs(1), JSON: true, Method: http.MethodPost,
		Flags: func(f *pflag.FlagSet) { f.StringVar(&req.OperatorNote, "note", "", "the operator's note: why") },
		Path:  func(x *call) string { return applicationsPath + "/" + seg(x.args[0]) + "/reject" },
		Body:  func(*call) any { return &req },
		Print: func(x *call, r *api.ProgramApplicationResponse) error {
			return printApplication(x, r.ProgramApplication)
		},
	})
}

// printApplication prints an application's fields, one a line.
func printApplication(x *call, a *api.ProgramApplication) error {
	return x.printf("ID:            %s\nStatus:        %s\nProgram:       %s\nCompany:       %s (%s)\nContact:       %s <%s>\nSegment:       %s\nTeam size:     %d\nUse case:      %s\nDiscount:      %s %s\nDecided:       %s by %s\nNote:          %s\nCreated:       %s\n",
		a.ID, a.Status, a.Program, a.CompanyName, orDash(a.CompanyWebsite), a.ContactName, a.Email, a.Segment, a.TeamSize, a.UseCase,
		orDash(a.DiscountID), a.DiscountCode, timeOr(a.DecidedAt, "-"), orDash(a.DecidedByUserID), orDash(a.OperatorNote), stamp(a.CreatedAt))
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
