package postgres

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"golang.org/x/sys/unix"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/theappliance/appliance/appliance/daemon"
)

// An initdb template (Instance.TemplateDir): initdb costs seconds (the bootstrap backend builds the
// catalogs, then every file is synced), while its result depends only on the binaries and initdb's options.
// So the first Init of a kind runs initdb once, kept as TemplateDir/<key>/pgdata (key: the binaries'
// identity, the options, the OS user), and every Init copies that data directory instead, then makes the copy its own
// as initdb would have: a new system identifier (in pg_control and the WAL's long page headers, so that WAL
// of one cluster is never taken for another's), the admin role's password set in single-user mode (no
// listener exists meanwhile), and the TLS files and configuration written after it as after initdb. The
// copy leaves all-zero blocks as holes (initdb's WAL segment is mostly zeros) and is synced file by file
// unless the instance runs without durability.

// keeping counts the templates being kept in the background (the tests wait for them).
var keeping sync.WaitGroup

// templateFormat changes when what a template holds changes (old ones are then not used).
const templateFormat = "1"

// initdbArgs are initdb's options after -D (the admin role's password file is given apart).
var initdbArgs = []string{"-U", AdminRole, "-A", "scram-sha-256", "--encoding=UTF8", "--locale=C.UTF-8", "--data-checksums", "--no-instructions"}

// runInitdb runs initdb into dataDir as the instance's user, the admin role getting verifier, from a
// password file in dir (removed after); noSync skips initdb's final sync.
func (i *Instance) runInitdb(ctx context.Context, ex daemon.ExecFunc, dir, dataDir, verifier string, noSync bool) error {
	initdb, err := i.Bin.Path("initdb")
	if err != nil {
		return err
	}
	pwfile := filepath.Join(dir, "initdb.pw")
	if err := i.User.WriteFile(pwfile, []byte(verifier+"\n"), 0o600); err != nil {
		return err
	}
	defer os.Remove(pwfile)
	args := append([]string{"-D", dataDir, "--pwfile=" + pwfile}, initdbArgs...)
	if noSync {
		args = append(args, "--no-sync")
	}
	cmd := i.User.Command(initdb, args...)
	cmd.Dir = dir
	return daemon.OrDefault(ex)(ctx, cmd)
}

// templateKey names the template of this instance's binaries, initdb's options and OS user.
func (i *Instance) templateKey() (string, error) {
	h := sha256.New()
	fmt.Fprintf(h, "format %s\nuser %d:%d\nargs %q\n", templateFormat, i.User.UID, i.User.GID, initdbArgs)
	for _, prog := range []string{"initdb", "postgres"} {
		p, err := i.Bin.Path(prog)
		if err != nil {
			return "", err
		}
		fi, err := os.Stat(p)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "%s %d %d\n", p, fi.Size(), fi.ModTime().UnixNano())
	}
	return fmt.Sprintf("pg%d-%s", i.Bin.Major, hex.EncodeToString(h.Sum(nil))[:20]), nil
}

// checkOwnDir refuses dir unless it is a directory (not a symbolic link) owned by uid that no one else may
// write: a template another user could have changed would become every new cluster.
func checkOwnDir(dir string, uid uint32) error {
	fi, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	switch {
	case !fi.IsDir():
		return fmt.Errorf("%s is not a directory", dir)
	case !ok || st.Uid != uid:
		return fmt.Errorf("%s is not owned by uid %d", dir, uid)
	case fi.Mode().Perm()&0o022 != 0:
		return fmt.Errorf("%s may be written by others (mode %04o)", dir, fi.Mode().Perm())
	}
	return nil
}

// CheckTemplateDir makes dir (mode 0700) if it is missing and refuses it unless this process's user owns
// it and no one else may write it: a template another user could change would become every new cluster.
func CheckTemplateDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	return checkOwnDir(dir, uint32(os.Geteuid()))
}

// template returns the template's data directory, making it first when there is none, and a function
// to call once the caller's copy of it is done. The template directory is the appliance's own (mode 0700:
// the instances' user never reads it; the appliance copies). A missing template is made by initdb, as the
// instances' user, in the instance's directory: the caller copies that, and keeping it (moved, or where
// the template directory is on another file system — a throwaway appliance's tmpfs and the user's cache
// — copied and synced) goes on in the background then, so that the first instance waits no longer than
// initdb.
func (i *Instance) template(ctx context.Context, ex daemon.ExecFunc) (string, func(), error) {
	if err := CheckTemplateDir(i.TemplateDir); err != nil {
		return "", nil, err
	}
	key, err := i.templateKey()
	if err != nil {
		return "", nil, err
	}
	dir := filepath.Join(i.TemplateDir, key)
	if err := checkOwnDir(dir, uint32(os.Geteuid())); err == nil {
		return filepath.Join(dir, "pgdata"), func() {}, nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return "", nil, err
	}
	build := filepath.Join(i.Dir, "template-build")
	if err := os.RemoveAll(build); err != nil {
		return "", nil, err
	}
	if err := i.User.Mkdir(build, 0o700); err != nil {
		return "", nil, err
	}
	throwaway, err := AdminVerifier(hex.EncodeToString(randomBytes(24))) // each copy gets its own
	if err == nil {
		err = i.runInitdb(ctx, ex, build, filepath.Join(build, "pgdata"), throwaway, true)
	}
	if err != nil {
		os.RemoveAll(build)
		return "", nil, fmt.Errorf("initdb template: %w", err)
	}
	return filepath.Join(build, "pgdata"), func() {
		// Moved aside first, here: a later Init of this instance (an upgrade's retry, after its failed
		// attempt removed the new cluster and, with it, this build before it was kept) builds in build
		// again, and the removal of what is kept in the background took that build from under its initdb.
		aside := build + "-" + hex.EncodeToString(randomBytes(6))
		if err := os.Rename(build, aside); err != nil {
			os.RemoveAll(build)
			return
		}
		keeping.Add(1)
		go func() {
			defer keeping.Done()
			defer os.RemoveAll(aside)
			_ = keepTemplate(filepath.Join(aside, "pgdata"), i.TemplateDir, dir, i.User) // the next Init makes it again
		}()
	}, nil
}

// keepTemplate moves (or copies) the data directory src into templates as dir, synced first: a template
// is there whole or not at all. Another Init keeping the same one meanwhile wins or loses the last rename;
// the loser's is removed. What a killed process left half-made (.new-*, an hour old) is removed.
func keepTemplate(src, templates, dir string, user *daemon.OSUser) error {
	if old, _ := filepath.Glob(filepath.Join(templates, ".new-*")); len(old) > 0 {
		for _, o := range old {
			if fi, err := os.Lstat(o); err == nil && time.Since(fi.ModTime()) > time.Hour {
				os.RemoveAll(o)
			}
		}
	}
	next, err := os.MkdirTemp(templates, ".new-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(next)
	if err := os.Rename(src, filepath.Join(next, "pgdata")); err != nil {
		// Another file system: copied.
		if err := copyTree(src, filepath.Join(next, "pgdata"), user, false); err != nil {
			return err
		}
	}
	if err := syncTree(next); err != nil {
		return err
	}
	return os.Rename(next, dir)
}

// initFromTemplate makes the instance's data directory a copy of the template with its own system
// identifier and the admin role's verifier (see the top of this file).
func (i *Instance) initFromTemplate(ctx context.Context, ex daemon.ExecFunc, verifier string) error {
	tpl, copied, err := i.template(ctx, ex)
	if err != nil {
		return err
	}
	err = copyTree(tpl, i.DataDir(), i.User, !i.NoSync)
	copied()
	if err != nil {
		return fmt.Errorf("copy the initdb template: %w", err)
	}
	if err := newSystemIdentifier(i.DataDir(), !i.NoSync); err != nil {
		return err
	}
	postgres, err := i.Bin.Path("postgres")
	if err != nil {
		return err
	}
	// Single-user mode: no listener, no other session; exit_on_error makes a failed statement its exit
	// status. The verifier is base64 and hex between $ signs: no quote can end the literal.
	if strings.ContainsAny(verifier, "'\\\n") {
		return errors.New("admin verifier holds a quote, a backslash or a newline")
	}
	args := []string{"--single", "-D", i.DataDir(), "-c", "exit_on_error=on", "-c", "log_min_messages=warning"}
	if i.NoSync {
		args = append(args, "-F")
	}
	cmd := i.User.Command(postgres, append(args, "template1")...)
	cmd.Dir = i.Dir
	cmd.Stdin = strings.NewReader("ALTER ROLE " + AdminRole + " PASSWORD '" + verifier + "';\n")
	cmd.Stdout = io.Discard
	if err := daemon.OrDefault(ex)(ctx, cmd); err != nil {
		return fmt.Errorf("set the admin password in single-user mode: %w", err)
	}
	return nil
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return b
}

// copyTree copies the data directory src to dst (which must not exist): directories and regular files
// only (anything else is refused; files are opened without following links), each with its mode, owned
// by user, all-zero blocks left as holes; synced when durable.
func copyTree(src, dst string, user *daemon.OSUser, durable bool) error {
	var dirs []string
	buf := make([]byte, 128<<10)
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		to := filepath.Join(dst, rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			if err := os.Mkdir(to, info.Mode().Perm()); err != nil {
				return err
			}
			if err := os.Chmod(to, info.Mode().Perm()); err != nil { // the umask's
				return err
			}
			dirs = append(dirs, to)
			return user.ChownOne(to)
		case d.Type().IsRegular():
			return copyFile(p, to, info.Mode().Perm(), user, durable, buf)
		default:
			return fmt.Errorf("%s is not a directory or a regular file", p)
		}
	})
	if err != nil || !durable {
		return err
	}
	for _, d := range dirs {
		if err := syncPath(d); err != nil {
			return err
		}
	}
	return nil
}

func copyFile(src, dst string, mode os.FileMode, user *daemon.OSUser, durable bool, buf []byte) error {
	in, err := os.OpenFile(src, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	err = copySparse(out, in, buf)
	if err == nil {
		err = out.Chmod(mode)
	}
	if err == nil {
		err = user.ChownFile(out)
	}
	if err == nil && durable {
		err = out.Sync()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return err
}

// copySparse copies in to out through buf, leaving all-zero blocks as holes (the size is set at the end).
func copySparse(out, in *os.File, buf []byte) error {
	var off int64
	for {
		n, err := io.ReadFull(in, buf)
		if n > 0 {
			chunk := buf[:n]
			if !allZero(chunk) {
				if _, err := out.WriteAt(chunk, off); err != nil {
					return err
				}
			}
			off += int64(n)
		}
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return out.Truncate(off)
		}
		if err != nil {
			return err
		}
	}
}

func allZero(b []byte) bool {
	for len(b) >= 8 {
		if binary.LittleEndian.Uint64(b) != 0 {
			return false
		}
		b = b[8:]
	}
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// syncPath fsyncs one file or directory.
func syncPath(p string) error {
	f, err := os.OpenFile(p, os.O_RDONLY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// syncTree syncs every file and directory under root.
func syncTree(root string) error {
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() || d.Type().IsRegular() {
			return syncPath(p)
		}
		return nil
	})
}

var (
	castagnoli = crc32.MakeTable(crc32.Castagnoli)
	walFileRE  = regexp.MustCompile(`^[0-9A-F]{24}$`)
)

const (
	pgControlFile = "global/pg_control"
	xlpLongHeader = 0x0002 // XLP_LONG_HEADER of xlp_info
	xlpSysidAt    = 24     // XLogLongPageHeaderData.xlp_sysid: after the 20 bytes of the short header, aligned
)

// newSystemIdentifier gives the cluster in dataDir (stopped) a new system identifier, as initdb makes one
// (the time in the high bits) but with random low bits: in pg_control (its CRC-32C recomputed: the CRC
// follows the fields it covers, found where the CRC of the bytes before it matches) and in the long header
// of each WAL segment's first page, which the server compares with pg_control's at its start.
func newSystemIdentifier(dataDir string, durable bool) error {
	path := filepath.Join(dataDir, pgControlFile)
	ctl, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	crcAt := -1
	for n := 16; n+4 <= len(ctl) && n <= 1024; n += 4 {
		if crc32.Checksum(ctl[:n], castagnoli) == binary.LittleEndian.Uint32(ctl[n:]) {
			crcAt = n
			break
		}
	}
	if crcAt < 0 {
		return fmt.Errorf("%s: no CRC found: not a pg_control this version knows", path)
	}
	old := binary.LittleEndian.Uint64(ctl)
	sysid := uint64(time.Now().Unix())<<32 | uint64(binary.LittleEndian.Uint32(randomBytes(4)))
	// The WAL first: a crash between the two leaves a cluster that refuses to start, never a mix.
	wal := filepath.Join(dataDir, "pg_wal")
	entries, err := os.ReadDir(wal)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if !e.Type().IsRegular() || !walFileRE.MatchString(e.Name()) {
			continue
		}
		if err := patchWALSysid(filepath.Join(wal, e.Name()), old, sysid, durable); err != nil {
			return err
		}
	}
	binary.LittleEndian.PutUint64(ctl, sysid)
	binary.LittleEndian.PutUint32(ctl[crcAt:], crc32.Checksum(ctl[:crcAt], castagnoli))
	f, err := os.OpenFile(path, os.O_WRONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteAt(ctl, 0)
	if err == nil && durable {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// patchWALSysid replaces the system identifier old of a WAL segment's long page header by sysid.
func patchWALSysid(path string, old, sysid uint64, durable bool) error {
	f, err := os.OpenFile(path, os.O_RDWR|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	hdr := make([]byte, xlpSysidAt+8)
	if _, err := f.ReadAt(hdr, 0); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if binary.LittleEndian.Uint16(hdr[2:])&xlpLongHeader == 0 || binary.LittleEndian.Uint64(hdr[xlpSysidAt:]) != old {
		return fmt.Errorf("%s: its first page has no long header of system identifier %d", path, old)
	}
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], sysid)
	if _, err := f.WriteAt(b[:], xlpSysidAt); err != nil {
		return err
	}
	if durable {
		return f.Sync()
	}
	return nil
}
