package daemon

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
)

// Names of the OS users DefaultOSUser picks when the appliance runs as root.
const (
	DebianOSUser    = "postgres"     // the Debian package's user, used when it exists
	ApplianceOSUser = "appliance-pg" // created as a system user otherwise
)

// OSUser is the unprivileged OS user the appliance's daemons (PostgreSQL, PgBouncer, Redis) run as. When the appliance runs as root,
// commands are switched to this user; otherwise it is the current user and nothing is switched (PostgreSQL
// refuses to run as root, so a root appliance must always switch).
type OSUser struct {
	Name string
	UID  uint32
	GID  uint32
	Home string // the user's home directory (HOME of its commands: libpq looks for ~/.postgresql there)

	switchTo bool // the appliance is root: commands get SysProcAttr.Credential and files are chowned
}

var validUserName = regexp.MustCompile(`^[a-z_][a-z0-9_-]{0,31}$`)

// DefaultOSUser returns the user instances run as: when the appliance runs as root, "postgres" if it exists
// and otherwise "appliance-pg" (created if needed); when it does not, the current user.
func DefaultOSUser() (*OSUser, error) {
	if os.Geteuid() == 0 {
		return EnsureOSUser(DefaultOSUserName())
	}
	return EnsureOSUser("")
}

// DefaultOSUserName is the user DefaultOSUser picks when the appliance runs as root, created or not yet.
func DefaultOSUserName() string {
	if _, err := user.Lookup(DebianOSUser); err == nil {
		return DebianOSUser
	}
	return ApplianceOSUser
}

// EnsureOSUser returns the OS user called name, creating it as a system user without home directory or login
// shell if it does not exist (useradd --system). When the appliance does not run as root, name is ignored and
// the current user is returned: an unprivileged process cannot switch users.
func EnsureOSUser(name string) (*OSUser, error) {
	if os.Geteuid() != 0 {
		u, err := user.Current()
		if err != nil {
			return nil, fmt.Errorf("look up current user: %w", err)
		}
		return osUserFrom(u, false)
	}
	if !validUserName.MatchString(name) {
		return nil, fmt.Errorf("invalid OS user name %q", name)
	}
	u, err := user.Lookup(name)
	var unknown user.UnknownUserError
	if errors.As(err, &unknown) {
		out, uerr := exec.Command("useradd", "--system", "--user-group", "--no-create-home",
			"--shell", "/usr/sbin/nologin", "--comment", "appliance PostgreSQL instances", name).CombinedOutput()
		u, err = user.Lookup(name) // another process may have created it concurrently: only its absence is an error
		if err != nil {
			return nil, fmt.Errorf("create OS user %s: %v: %s", name, uerr, strings.TrimSpace(string(out)))
		}
	}
	if err != nil {
		return nil, fmt.Errorf("look up OS user %s: %w", name, err)
	}
	ou, err := osUserFrom(u, true)
	if err != nil {
		return nil, err
	}
	if ou.UID == 0 {
		return nil, fmt.Errorf("OS user %s is root: PostgreSQL refuses to run as root", name)
	}
	return ou, nil
}

func osUserFrom(u *user.User, switchTo bool) (*OSUser, error) {
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("user %s: uid %q: %w", u.Username, u.Uid, err)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("user %s: gid %q: %w", u.Username, u.Gid, err)
	}
	return &OSUser{Name: u.Username, UID: uint32(uid), GID: uint32(gid), Home: u.HomeDir, switchTo: switchTo}, nil
}

// Command returns a command that runs program as the user, in a session of its own (Setsid) so that a
// Ctrl-C in the terminal of `appliance up` reaches the appliance only, never the instances directly. PG*
// variables are removed from the environment (PGPORT, PGDATA... would change what the programs do).
func (u *OSUser) Command(program string, args ...string) *exec.Cmd {
	cmd := exec.Command(program, args...)
	u.Prepare(cmd)
	return cmd
}

// Prepare sets cmd up to run as the user (see Command).
func (u *OSUser) Prepare(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setsid = true
	if u.switchTo {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: u.UID, Gid: u.GID, Groups: []uint32{}}
	}
	if cmd.Env == nil {
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, "PG") {
				cmd.Env = append(cmd.Env, kv)
			}
		}
		if u.switchTo {
			// Root's HOME would make libpq (pg_dump, a subscription's walreceiver) read /root/.postgresql,
			// which the user may not open.
			cmd.Env = append(cmd.Env, "HOME="+u.Home)
		}
	}
}

// Chown gives the tree at path to the user (a no-op unless the appliance runs as root). Symbolic links are
// changed themselves, never followed.
func (u *OSUser) Chown(path string) error {
	if !u.switchTo {
		return nil
	}
	return filepath.WalkDir(path, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := os.Lchown(p, int(u.UID), int(u.GID)); err != nil {
			return fmt.Errorf("chown %s to %s: %w", p, u.Name, err)
		}
		return nil
	})
}

// Mkdir creates dir with mode (its parent must exist) owned by the user; an existing dir gets mode and owner.
func (u *OSUser) Mkdir(dir string, mode os.FileMode) error {
	if err := os.Mkdir(dir, mode); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	if err := os.Chmod(dir, mode); err != nil {
		return err
	}
	return u.ChownOne(dir)
}

// ChownOne gives path (not what is below it) to the user.
func (u *OSUser) ChownOne(path string) error {
	if !u.switchTo {
		return nil
	}
	if err := os.Lchown(path, int(u.UID), int(u.GID)); err != nil {
		return fmt.Errorf("chown %s to %s: %w", path, u.Name, err)
	}
	return nil
}

// ChownFile gives the open file f to the user (fchown: no path is looked up again).
func (u *OSUser) ChownFile(f *os.File) error {
	if !u.switchTo {
		return nil
	}
	if err := f.Chown(int(u.UID), int(u.GID)); err != nil {
		return fmt.Errorf("chown %s to %s: %w", f.Name(), u.Name, err)
	}
	return nil
}

// WriteFile atomically and durably replaces path with data, owned by the user with mode.
func (u *OSUser) WriteFile(path string, data []byte, mode os.FileMode) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp, mode) // an existing tmp file keeps its mode
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	if err := u.ChownOne(tmp); err != nil {
		os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}

// CheckReachable verifies the user can traverse every parent of dir: instance directories may live under
// root-owned directories, which must then be searchable by others (mode 0711 is enough).
func (u *OSUser) CheckReachable(dir string) error {
	if !u.switchTo {
		return nil
	}
	for p := filepath.Dir(dir); ; p = filepath.Dir(p) {
		fi, err := os.Stat(p)
		if err != nil {
			return err
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if ok {
			perm := fi.Mode().Perm()
			var x os.FileMode = 0o001
			switch {
			case st.Uid == u.UID:
				x = 0o100
			case st.Gid == u.GID:
				x = 0o010
			}
			if perm&x == 0 {
				return fmt.Errorf("OS user %s cannot traverse %s (mode %04o, owner %d): parents of instance directories must be searchable by it, e.g. mode 0711", u.Name, p, perm, st.Uid)
			}
		}
		if p == filepath.Dir(p) {
			return nil
		}
	}
}
