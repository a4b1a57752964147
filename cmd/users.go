package cmd

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/term"

	"github.com/theappliance/appliance/api"
)

var _ = registerClientGroup("users", []string{"user", "members"}, "List, add and remove the organization's people and set their roles",
	newUsersListCmd, newUsersAddCmd, newUsersSetRoleCmd, newUsersRemoveCmd, newUsersPasswordCmd,
	newUsersInvitationsCmd, usersAnswerCmd("accept"), usersAnswerCmd("decline"))

func membersPath(org string) string { return "/v1/organizations/" + seg(org) + "/members" }

func newUsersListCmd(o *clientOpts) *cobra.Command {
	return newAPICmd(o, apiCmd[api.MemberList]{
		Use: "list", Aliases: []string{"ls"}, Short: "List the organization's members and their roles", Org: true, JSON: true,
		Path:    func(x *call) string { return membersPath(x.org) },
		Columns: []string{"USER ID", "EMAIL", "NAME", "ROLE", "CREATED"},
		Rows: func(l *api.MemberList) [][]string {
			return rowsOf(l.Members, func(m api.Member) []string {
				return []string{m.UserID, m.Email, firstNonEmpty(m.Name, "-"), m.Role, stamp(m.CreatedAt)}
			})
		},
	})
}

func newUsersAddCmd(o *clientOpts) *cobra.Command {
	var name, role string
	return newAPICmd(o, apiCmd[api.AddedMember]{
		Use:   "add EMAIL",
		Short: "Add a person with a role (a new user gets a generated password, printed once)",
		Long: `Add a person to the organization with a role: owner, admin or member (only owners may add owners).
An email the appliance does not know creates a user whose initial password is generated and printed once,
alone on standard output; they change it with 'appliance users password'. An email that already has a
user is invited instead: they join by accepting the invitation signed in (POST /v1/me/invitations/ID/accept).`,
		Example: `  appliance users add dana@example.com --role member --name "Dana Müller"`,
		Args:    cobra.ExactArgs(1),
		Flags: func(f *pflag.FlagSet) {
			f.StringVar(&role, "role", "", "owner, admin or member (required)")
			f.StringVar(&name, "name", "", "display name of a new user")
		},
		Validate: func(*call) error {
			if role == "" {
				return errors.New("--role is required: owner, admin or member")
			}
			return nil
		},
		Org: true, Method: http.MethodPost,
		Path: func(x *call) string { return membersPath(x.org) },
		Body: func(x *call) any { return api.AddMemberRequest{Email: x.args[0], Role: role, Name: name} },
		Print: func(x *call, res *api.AddedMember) error {
			m, errw := res.Member, x.c.ErrOrStderr()
			if inv := res.Invitation; inv != nil {
				fmt.Fprintf(errw, "%s already has a user: invited to organization %s as %s (invitation %s, until %s). They join by accepting it signed in.\n",
					m.Email, x.org, m.Role, inv.ID, inv.ExpiresAt.Format(time.RFC3339))
				return nil
			}
			fmt.Fprintf(errw, "Added %s (%s) to organization %s as %s.\n", m.Email, m.UserID, x.org, m.Role)
			if res.InitialPassword != "" {
				fmt.Fprintln(errw, "Their initial password follows; it is shown only this once. Hand it over safely; they should change it.")
				fmt.Fprintln(x.out(), res.InitialPassword)
			}
			return nil
		},
	})
}

func newUsersSetRoleCmd(o *clientOpts) *cobra.Command {
	return newAPICmd(o, apiCmd[api.MemberResponse]{
		Use: "set-role USER_ID ROLE", Short: "Change a member's role (their sessions and keys act with it at once)",
		Args: cobra.ExactArgs(2), Org: true, Method: http.MethodPatch,
		Path: func(x *call) string { return membersPath(x.org) + "/" + seg(x.args[0]) },
		Body: func(x *call) any { return api.SetMemberRoleRequest{Role: x.args[1]} },
		Print: func(x *call, r *api.MemberResponse) error {
			return x.printf("%s (%s) is now %s.\n", r.Member.Email, r.Member.UserID, r.Member.Role)
		},
	})
}

func newUsersRemoveCmd(o *clientOpts) *cobra.Command {
	return newAPICmd(o, apiCmd[api.RemovedMember]{
		Use: "remove USER_ID", Aliases: []string{"rm"}, Args: cobra.ExactArgs(1), Org: true, Method: http.MethodDelete,
		Short: "Remove a member: their sessions end and the API keys they created here are revoked",
		Path:  func(x *call) string { return membersPath(x.org) + "/" + seg(x.args[0]) },
		Print: func(x *call, r *api.RemovedMember) error {
			keys := strings.Join(r.RevokedAPIKeys, ", ")
			if keys != "" {
				keys = ": " + keys
			}
			return x.printf("Removed %s from organization %s; revoked %d API key(s)%s.\n", x.args[0], x.org, len(r.RevokedAPIKeys), keys)
		},
	})
}

func newUsersPasswordCmd(o *clientOpts) *cobra.Command {
	var (
		email         = emailFlag()
		cur, next     string
		passwordStdin bool
	)
	return newAPICmd(o, apiCmd[api.PasswordChanged]{
		Use:   "password",
		Short: "Change your password (signs out your other sessions)",
		Long: `Sign in with your email and current password and set a new one (12 to 72 bytes). With --password-stdin,
standard input holds two lines: the current password, then the new one. Otherwise APPLIANCE_PASSWORD and
APPLIANCE_NEW_PASSWORD are used, else both are prompted for (without echo) on a terminal.`,
		Example: `  appliance users password --email you@example.com
  printf '%s\n%s\n' "$OLD" "$NEW" | appliance users password --email you@example.com --password-stdin`,
		Flags: func(f *pflag.FlagSet) {
			email.bind(f)
			f.BoolVar(&passwordStdin, "password-stdin", false, "read the current and the new password, one per line, from standard input")
		},
		Validate: func(x *call) (err error) {
			if err := email.resolve(x); err != nil {
				return err
			}
			cur, next, err = readPasswordChange(x.c, passwordStdin, email.value)
			return err
		},
		Client: func(x *call) (*apiClient, error) { return signIn(x, email.value, cur, "") },
		Method: http.MethodPost,
		Path:   func(*call) string { return "/v1/auth/password" },
		Body:   func(*call) any { return api.ChangePasswordRequest{CurrentPassword: cur, NewPassword: next} },
		Print: func(x *call, res *api.PasswordChanged) error {
			return x.printf("Changed the password of %s; signed out %d other session(s).\n", email.value, res.SessionsRevoked)
		},
	})
}

// signedInCmd is s signing in as the user (--email, --password-stdin) instead of using the API key (s's
// own Flags and Validate come after the sign-in's).
func signedInCmd[Res any](o *clientOpts, s apiCmd[Res]) *cobra.Command {
	var (
		email         = emailFlag()
		passwordStdin bool
	)
	own, validate := s.Flags, s.Validate
	s.Flags = func(f *pflag.FlagSet) {
		email.bind(f)
		f.BoolVar(&passwordStdin, "password-stdin", false, "read your password from standard input")
		if own != nil {
			own(f)
		}
	}
	s.Validate = func(x *call) error {
		if err := email.resolve(x); err != nil || validate == nil {
			return err
		}
		return validate(x)
	}
	s.Client = func(x *call) (*apiClient, error) {
		password, err := readPassword(x.c, passwordStdin, email.value)
		if err != nil {
			return nil, err
		}
		return signIn(x, email.value, password, "")
	}
	return newAPICmd(o, s)
}

func newUsersInvitationsCmd(o *clientOpts) *cobra.Command {
	return signedInCmd(o, apiCmd[api.InvitationList]{
		Use:     "invitations",
		Short:   "List your pending invitations to other organizations (signs in as you)",
		Example: `  appliance users invitations --email you@example.com`,
		Path:    func(*call) string { return "/v1/me/invitations" },
		Columns: []string{"ID", "ORGANIZATION", "ROLE", "EXPIRES"},
		Rows: func(l *api.InvitationList) [][]string {
			return rowsOf(l.Invitations, func(inv api.Invitation) []string {
				return []string{inv.ID, inv.OrganizationName + " (" + inv.OrganizationID + ")", inv.Role, inv.ExpiresAt.Format(time.RFC3339)}
			})
		},
	})
}

// usersAnswerCmd accepts or declines an invitation (verb: accept or decline).
func usersAnswerCmd(verb string) func(*clientOpts) *cobra.Command {
	return func(o *clientOpts) *cobra.Command {
		return signedInCmd(o, apiCmd[api.MemberResponse]{
			Use:     verb + " INVITATION_ID",
			Short:   strings.ToUpper(verb[:1]) + verb[1:] + " an invitation to an organization (signs in as you)",
			Example: "  appliance users " + verb + " inv_... --email you@example.com",
			Args:    cobra.ExactArgs(1), Method: http.MethodPost, NoAnswer: verb == "decline",
			Path: func(x *call) string { return "/v1/me/invitations/" + seg(x.args[0]) + "/" + verb },
			Print: func(x *call, r *api.MemberResponse) error {
				if verb == "decline" {
					x.printf("Declined invitation %s.\n", x.args[0])
				} else {
					x.printf("Joined the organization as %s (sign in with --org to act in it).\n", r.Member.Role)
				}
				return nil
			},
		})
	}
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
