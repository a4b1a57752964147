package cmd

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/theappliance/appliance/appliance"
)

var _ = registerClientCommand(newUsersCmd)

func newUsersCmd(o *clientOpts) *cobra.Command {
	return groupCmd("users", []string{"user", "members"}, "List, add and remove the organization's people and set their roles",
		newUsersListCmd(o), newUsersAddCmd(o), newUsersSetRoleCmd(o), newUsersRemoveCmd(o), newUsersPasswordCmd(o),
		newUsersInvitationsCmd(o), newUsersAnswerCmd(o, "accept"), newUsersAnswerCmd(o, "decline"))
}

func membersPath(org string) string { return "/v1/organizations/" + seg(org) + "/members" }

func newUsersListCmd(o *clientOpts) *cobra.Command {
	var (
		org    string
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List the organization's members and their roles",
		Args:    cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			_, orgID, err := orgClient(c, o, org)
			if err != nil {
				return err
			}
			var list appliance.MemberList
			if done, err := o.show(c, membersPath(orgID), asJSON, &list); done || err != nil {
				return err
			}
			tw := tabwriter.NewWriter(c.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "USER ID\tEMAIL\tNAME\tROLE\tCREATED")
			for _, m := range list.Members {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", m.UserID, m.Email, firstNonEmpty(m.Name, "-"), m.Role, m.CreatedAt.UTC().Format(time.RFC3339))
			}
			return tw.Flush()
		},
	}
	orgFlag(cmd, &org)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the API's JSON answer")
	return cmd
}

func newUsersAddCmd(o *clientOpts) *cobra.Command {
	var org, name, role string
	cmd := &cobra.Command{
		Use:   "add EMAIL",
		Short: "Add a person with a role (a new user gets a generated password, printed once)",
		Long: `Add a person to the organization with a role: owner, admin or member (only owners may add owners).
An email the appliance does not know creates a user whose initial password is generated and printed once,
alone on standard output; they change it with 'appliance users password'. An email that already has a
user is invited instead: they join by accepting the invitation signed in (POST /v1/me/invitations/ID/accept).`,
		Example: `  appliance users add dana@example.com --role member --name "Dana Müller"`,
		Args:    cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			if role == "" {
				return errors.New("--role is required: owner, admin or member")
			}
			cl, orgID, err := orgClient(c, o, org)
			if err != nil {
				return err
			}
			var res appliance.AddedMember
			body := map[string]any{"email": args[0], "role": role, "name": name}
			if err := cl.do(c.Context(), http.MethodPost, membersPath(orgID), body, &res); err != nil {
				return err
			}
			m := res.Member
			if inv := res.Invitation; inv != nil {
				fmt.Fprintf(c.ErrOrStderr(), "%s already has a user: invited to organization %s as %s (invitation %s, until %s). They join by accepting it signed in.\n",
					m.Email, orgID, m.Role, inv.ID, inv.ExpiresAt.Format(time.RFC3339))
				return nil
			}
			fmt.Fprintf(c.ErrOrStderr(), "Added %s (%s) to organization %s as %s.\n", m.Email, m.UserID, orgID, m.Role)
			if res.InitialPassword != "" {
				fmt.Fprintln(c.ErrOrStderr(), "Their initial password follows; it is shown only this once. Hand it over safely; they should change it.")
				fmt.Fprintln(c.OutOrStdout(), res.InitialPassword)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&role, "role", "", "owner, admin or member (required)")
	cmd.Flags().StringVar(&name, "name", "", "display name of a new user")
	orgFlag(cmd, &org)
	return cmd
}

func newUsersSetRoleCmd(o *clientOpts) *cobra.Command {
	var org string
	cmd := &cobra.Command{
		Use:   "set-role USER_ID ROLE",
		Short: "Change a member's role (their sessions and keys act with it at once)",
		Args:  cobra.ExactArgs(2),
		RunE: func(c *cobra.Command, args []string) error {
			cl, orgID, err := orgClient(c, o, org)
			if err != nil {
				return err
			}
			var res appliance.MemberResponse
			if err := cl.do(c.Context(), http.MethodPatch, membersPath(orgID)+"/"+seg(args[0]), map[string]any{"role": args[1]}, &res); err != nil {
				return err
			}
			fmt.Fprintf(c.OutOrStdout(), "%s (%s) is now %s.\n", res.Member.Email, res.Member.UserID, res.Member.Role)
			return nil
		},
	}
	orgFlag(cmd, &org)
	return cmd
}

func newUsersRemoveCmd(o *clientOpts) *cobra.Command {
	var org string
	cmd := &cobra.Command{
		Use:     "remove USER_ID",
		Aliases: []string{"rm"},
		Short:   "Remove a member: their sessions end and the API keys they created here are revoked",
		Args:    cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			cl, orgID, err := orgClient(c, o, org)
			if err != nil {
				return err
			}
			var res appliance.RemovedMember
			if err := cl.do(c.Context(), http.MethodDelete, membersPath(orgID)+"/"+seg(args[0]), nil, &res); err != nil {
				return err
			}
			fmt.Fprintf(c.OutOrStdout(), "Removed %s from organization %s; revoked %d API key(s)%s.\n", args[0], orgID,
				len(res.RevokedAPIKeys), prefixed(": ", strings.Join(res.RevokedAPIKeys, ", ")))
			return nil
		},
	}
	orgFlag(cmd, &org)
	return cmd
}

func prefixed(prefix, s string) string {
	if s == "" {
		return ""
	}
	return prefix + s
}

func newUsersPasswordCmd(o *clientOpts) *cobra.Command {
	var (
		email         string
		passwordStdin bool
	)
	cmd := &cobra.Command{
		Use:   "password",
		Short: "Change your password (signs out your other sessions)",
		Long: `Sign in with your email and current password and set a new one (12 to 72 bytes). With --password-stdin,
standard input holds two lines: the current password, then the new one. Otherwise APPLIANCE_PASSWORD and
APPLIANCE_NEW_PASSWORD are used, else both are prompted for (without echo) on a terminal.`,
		Example: `  appliance users password --email you@example.com
  printf '%s\n%s\n' "$OLD" "$NEW" | appliance users password --email you@example.com --password-stdin`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			email = firstNonEmpty(email, os.Getenv("APPLIANCE_EMAIL"))
			if email == "" {
				return errors.New("--email is required (or set APPLIANCE_EMAIL)")
			}
			cur, next, err := readPasswordChange(c, passwordStdin, email)
			if err != nil {
				return err
			}
			cn, err := o.resolve()
			if err != nil {
				return err
			}
			cl, err := cn.anonymous()
			if err != nil {
				return err
			}
			sc, err := signIn(c, cl, email, cur, "")
			if err != nil {
				return err
			}
			var res appliance.PasswordChanged
			body := map[string]any{"current_password": cur, "new_password": next}
			if err := sc.do(c.Context(), http.MethodPost, "/v1/auth/password", body, &res); err != nil {
				return err
			}
			fmt.Fprintf(c.OutOrStdout(), "Changed the password of %s; signed out %d other session(s).\n", email, res.SessionsRevoked)
			return nil
		},
	}
	cmd.Flags().StringVar(&email, "email", "", "your email address (APPLIANCE_EMAIL)")
	cmd.Flags().BoolVar(&passwordStdin, "password-stdin", false, "read the current and the new password, one per line, from standard input")
	return cmd
}

// signedIn signs email in with the password from stdin, APPLIANCE_PASSWORD or a prompt.
func signedIn(c *cobra.Command, o *clientOpts, email string, passwordStdin bool) (*apiClient, error) {
	email = firstNonEmpty(email, os.Getenv("APPLIANCE_EMAIL"))
	if email == "" {
		return nil, errors.New("--email is required (or set APPLIANCE_EMAIL)")
	}
	password, err := readPassword(c, passwordStdin, email)
	if err != nil {
		return nil, err
	}
	cn, err := o.resolve()
	if err != nil {
		return nil, err
	}
	cl, err := cn.anonymous()
	if err != nil {
		return nil, err
	}
	return signIn(c, cl, email, password, "")
}

func newUsersInvitationsCmd(o *clientOpts) *cobra.Command {
	var (
		email         string
		passwordStdin bool
	)
	cmd := &cobra.Command{
		Use:     "invitations",
		Short:   "List your pending invitations to other organizations (signs in as you)",
		Example: `  appliance users invitations --email you@example.com`,
		Args:    cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			sc, err := signedIn(c, o, email, passwordStdin)
			if err != nil {
				return err
			}
			var res appliance.InvitationList
			if err := sc.do(c.Context(), http.MethodGet, "/v1/me/invitations", nil, &res); err != nil {
				return err
			}
			w := tabwriter.NewWriter(c.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "ID\tORGANIZATION\tROLE\tEXPIRES")
			for _, inv := range res.Invitations {
				fmt.Fprintf(w, "%s\t%s (%s)\t%s\t%s\n", inv.ID, inv.OrganizationName, inv.OrganizationID, inv.Role, inv.ExpiresAt.Format(time.RFC3339))
			}
			return w.Flush()
		},
	}
	cmd.Flags().StringVar(&email, "email", "", "your email address (APPLIANCE_EMAIL)")
	cmd.Flags().BoolVar(&passwordStdin, "password-stdin", false, "read your password from standard input")
	return cmd
}

// newUsersAnswerCmd accepts or declines an invitation (verb: accept or decline).
func newUsersAnswerCmd(o *clientOpts, verb string) *cobra.Command {
	var (
		email         string
		passwordStdin bool
	)
	cmd := &cobra.Command{
		Use:     verb + " INVITATION_ID",
		Short:   strings.ToUpper(verb[:1]) + verb[1:] + " an invitation to an organization (signs in as you)",
		Example: "  appliance users " + verb + " inv_... --email you@example.com",
		Args:    cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			sc, err := signedIn(c, o, email, passwordStdin)
			if err != nil {
				return err
			}
			if verb == "decline" {
				if err := sc.do(c.Context(), http.MethodPost, "/v1/me/invitations/"+seg(args[0])+"/decline", nil, nil); err != nil {
					return err
				}
				fmt.Fprintf(c.OutOrStdout(), "Declined invitation %s.\n", args[0])
				return nil
			}
			var res appliance.MemberResponse
			if err := sc.do(c.Context(), http.MethodPost, "/v1/me/invitations/"+seg(args[0])+"/accept", nil, &res); err != nil {
				return err
			}
			fmt.Fprintf(c.OutOrStdout(), "Joined the organization as %s (sign in with --org to act in it).\n", res.Member.Role)
			return nil
		},
	}
	cmd.Flags().StringVar(&email, "email", "", "your email address (APPLIANCE_EMAIL)")
	cmd.Flags().BoolVar(&passwordStdin, "password-stdin", false, "read your password from standard input")
	return cmd
}

// readPasswordChange reads the current and the new password: two lines of stdin, the environment, or
// no-echo prompts (the new one twice).
func readPasswordChange(c *cobra.Command, fromStdin bool, email string) (cur, next string, err error) {
	if fromStdin {
		sc := bufio.NewScanner(io.LimitReader(c.InOrStdin(), 64<<10))
		var lines []string
		for sc.Scan() {
			lines = append(lines, strings.TrimRight(sc.Text(), "\r"))
		}
		if len(lines) < 2 || lines[0] == "" || lines[1] == "" {
			return "", "", errors.New("--password-stdin: standard input must hold the current password and the new one, one per line")
		}
		return lines[0], lines[1], nil
	}
	if cur, next = os.Getenv("APPLIANCE_PASSWORD"), os.Getenv("APPLIANCE_NEW_PASSWORD"); cur != "" && next != "" {
		return cur, next, nil
	}
	f, ok := c.InOrStdin().(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return "", "", errors.New("no passwords: pipe them in with --password-stdin, set APPLIANCE_PASSWORD and APPLIANCE_NEW_PASSWORD, or run in a terminal to be prompted")
	}
	prompt := func(label string) (string, error) {
		fmt.Fprint(c.ErrOrStderr(), label)
		b, err := term.ReadPassword(int(f.Fd()))
		fmt.Fprintln(c.ErrOrStderr())
		return string(b), err
	}
	if cur, err = prompt("Current password for " + email + ": "); err != nil {
		return "", "", err
	}
	if next, err = prompt("New password: "); err != nil {
		return "", "", err
	}
	again, err := prompt("New password again: ")
	if err != nil {
		return "", "", err
	}
	if again != next {
		return "", "", errors.New("the new passwords differ")
	}
	return cur, next, nil
}
