// Package walsock carries PostgreSQL's WAL between its archive_command / restore_command and a backup
// store that PostgreSQL cannot reach by itself (a bucket): the appliance serves the store on a unix
// socket (Server), and PostgreSQL runs the appliance's program as `appliance wal push` / `appliance wal
// fetch` (Main, the client), which stream one file over the socket. A push exits 0 only after the store's
// Put returned, so PostgreSQL never recycles a segment the store does not hold; a fetch exits non-zero
// when the store has no such file, as restore_command must.
//
// The protocol is HTTP on the socket: PUT /wal/<project>/<file> (204 once stored) and GET
// /wal/<project>/<file> (200 with the bytes, 404 when missing), with ?archive=<name> for the archive of a
// later cluster of the project (backup.Store's walArchive; none: the project's first cluster's). Whoever reaches the socket reaches every
// project's archive: the socket's directory is the instances' OS user's, mode 0700.
package walsock

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/theappliance/appliance/appliance/backup"
)

// Server serves a backup.Store's WAL archive on a unix socket.
type Server struct {
	srv    *http.Server
	done   chan struct{}
	pushes pushes
}

// Pushes is what the socket stored so far, and its last failure (for /status).
type Pushes struct {
	Stored      int64     // WAL files stored
	Bytes       int64     // their bytes
	LastStored  time.Time // when the last one was stored (zero: none yet)
	LastError   string    // the last push that failed, and why ("" when none failed)
	LastErrorAt time.Time
}

type pushes struct {
	mu sync.Mutex
	Pushes
}

func (p *pushes) note(n int64, err error, now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err != nil {
		p.LastError, p.LastErrorAt = err.Error(), now
		return
	}
	p.Stored++
	p.Bytes += n
	p.LastStored = now
}

// Pushes reports what the socket stored so far and its last failure.
func (s *Server) Pushes() Pushes {
	s.pushes.mu.Lock()
	defer s.pushes.mu.Unlock()
	return s.pushes.Pushes
}

// maxSocketPath is what a sockaddr_un holds (108 bytes on Linux, with the terminating NUL).
const maxSocketPath = 107

// Start listens on the unix socket path (removing a stale one), in its directory made mode 0700 and given
// with the socket to the instances' OS user (chown; nil: the appliance is that user), and serves st.
func Start(path string, chown func(string) error, st *backup.Store, log *slog.Logger) (*Server, error) {
	if len(path) > maxSocketPath {
		return nil, fmt.Errorf("wal socket %s: longer than the %d bytes a unix socket's path may have (use a shorter data directory)", path, maxSocketPath)
	}
	if chown == nil {
		chown = func(string) error { return nil }
	}
	dir := filepath.Dir(path)
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, fmt.Errorf("wal socket directory: %w", err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return nil, fmt.Errorf("wal socket directory: %w", err)
	}
	if err := chown(dir); err != nil {
		return nil, fmt.Errorf("wal socket directory: %w", err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("remove the stale wal socket: %w", err)
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("wal socket: %w", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, err
	}
	if err := chown(path); err != nil {
		ln.Close()
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{done: make(chan struct{})}
	s.srv = &http.Server{Handler: handler(st, log, &s.pushes), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("wal socket", "err", err)
		}
	}()
	return s, nil
}

// Stop stops serving: requests in progress (a push being stored) finish first, until ctx ends.
// Idempotent.
func (s *Server) Stop(ctx context.Context) error {
	err := s.srv.Shutdown(ctx)
	<-s.done
	return err
}

// handler is the socket's HTTP handler on st, noting each push's outcome in p.
func handler(st *backup.Store, log *slog.Logger, p *pushes) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("PUT /wal/{project}/{file}", func(w http.ResponseWriter, r *http.Request) {
		project, file, archive := r.PathValue("project"), r.PathValue("file"), r.URL.Query().Get("archive")
		if r.ContentLength < 0 {
			http.Error(w, "a push needs its Content-Length", http.StatusLengthRequired)
			return
		}
		n, err := st.PutWAL(r.Context(), project, archive, file, r.Body)
		if err == nil && n != r.ContentLength {
			err = fmt.Errorf("stored %d bytes of %d", n, r.ContentLength)
		}
		p.note(n, err, time.Now())
		if err != nil {
			log.Warn("archive a WAL file", "project", project, "file", file, "err", err)
			http.Error(w, fmt.Sprintf("store %s of %s: %v", file, project, err), http.StatusBadGateway)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("GET /wal/{project}/{file}", func(w http.ResponseWriter, r *http.Request) {
		project, file, archive := r.PathValue("project"), r.PathValue("file"), r.URL.Query().Get("archive")
		rc, err := st.GetWAL(r.Context(), project, archive, file)
		if errors.Is(err, backup.ErrNotExist) {
			http.Error(w, fmt.Sprintf("%s is not in the archive of %s", file, project), http.StatusNotFound)
			return
		}
		if err != nil {
			log.Warn("fetch a WAL file", "project", project, "file", file, "err", err)
			http.Error(w, fmt.Sprintf("fetch %s of %s: %v", file, project, err), http.StatusBadGateway)
			return
		}
		defer rc.Close()
		w.Header().Set("Content-Type", "application/octet-stream")
		if _, err := io.Copy(w, rc); err != nil {
			// The body is chunked: ending the connection without its last chunk makes the client fail.
			log.Warn("fetch a WAL file", "project", project, "file", file, "err", err)
			panic(http.ErrAbortHandler)
		}
	})
	return mux
}

// ErrNotFound is what Fetch returns (wrapped) when the archive has no such file.
var ErrNotFound = errors.New("not in the archive")

func client(socket string) *http.Client {
	return &http.Client{Transport: &http.Transport{DisableKeepAlives: true,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		}}}
}

func walURL(project, archive, file string) string {
	u := "http://wal/wal/" + url.PathEscape(project) + "/" + url.PathEscape(file)
	if archive != "" {
		u += "?archive=" + url.QueryEscape(archive)
	}
	return u
}

// Push sends the file at path to the archive of project (its cluster's archive: "" the first's) as file,
// and returns once the store has it.
func Push(ctx context.Context, socket, project, archive, path, file string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, walURL(project, archive, file), f)
	if err != nil {
		return err
	}
	req.ContentLength = fi.Size()
	resp, err := client(socket).Do(req)
	if err != nil {
		return fmt.Errorf("the appliance (%s): %w", socket, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return fmt.Errorf("the appliance refused %s: %s", file, strings.TrimSpace(string(msg)))
	}
	return nil
}

// Fetch writes the file of the archive of project (its cluster's archive: "" the first's) to path
// (through a temporary file beside it, renamed into place once complete); a file the archive lacks is
// ErrNotFound.
func Fetch(ctx context.Context, socket, project, archive, file, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, walURL(project, archive, file), nil)
	if err != nil {
		return err
	}
	resp, err := client(socket).Do(req)
	if err != nil {
		return fmt.Errorf("the appliance (%s): %w", socket, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound {
		return fmt.Errorf("%s of %s: %w", file, project, ErrNotFound)
	}
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return fmt.Errorf("the appliance could not fetch %s: %s", file, strings.TrimSpace(string(msg)))
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".fetch-*")
	if err != nil {
		return err
	}
	_, err = io.Copy(tmp, resp.Body)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("fetch %s: %w", file, err)
	}
	return nil
}

// Main runs `wal push --socket S --project P [--archive A] PATH FILE` or `wal fetch --socket S --project P
// [--archive A] FILE PATH` (args without "wal"), writing what went wrong to stderr; it returns the
// process's exit status.
func Main(args []string, stderr io.Writer) int {
	if err := run(args); err != nil {
		fmt.Fprintln(stderr, "appliance wal:", err)
		return 1
	}
	return 0
}

func run(args []string) error {
	if len(args) == 0 || (args[0] != "push" && args[0] != "fetch") {
		return errors.New("usage: wal push|fetch --socket PATH --project ID ARG ARG")
	}
	flags := flag.NewFlagSet("wal "+args[0], flag.ContinueOnError)
	flags.SetOutput(io.Discard)
	socket := flags.String("socket", "", "the appliance's WAL socket")
	project := flags.String("project", "", "the project whose archive it is")
	archive := flags.String("archive", "", "the archive of the project's cluster (none: its first cluster's)")
	if err := flags.Parse(args[1:]); err != nil {
		return err
	}
	if *socket == "" || *project == "" || flags.NArg() != 2 {
		return fmt.Errorf("usage: wal %s --socket PATH --project ID ARG ARG", args[0])
	}
	if args[0] == "push" {
		return Push(context.Background(), *socket, *project, *archive, flags.Arg(0), flags.Arg(1))
	}
	return Fetch(context.Background(), *socket, *project, *archive, flags.Arg(0), flags.Arg(1))
}

// Commands are the archive_command and restore_command that run program (its argv: the appliance's
// binary, and the arguments that reach its `wal` subcommand) on the socket for the archive walArchive of
// project ("" its first cluster's: no --archive, the commands of before there were several). Every
// argument is quoted for sh, and % doubled (PostgreSQL's escape).
func Commands(program []string, socket, project, walArchive string) (archive, restore string, err error) {
	if len(program) == 0 {
		return "", "", errors.New("no program to carry the WAL (the appliance's binary)")
	}
	words := append(append([]string{}, program...), "wal")
	for _, w := range append(append([]string{}, words...), socket, project, walArchive) {
		if strings.ContainsAny(w, "\n\r\x00") {
			return "", "", fmt.Errorf("%q: a control character in a WAL command", w)
		}
	}
	base := quoteAll(words...)
	opts := " --socket " + quote(socket) + " --project " + quote(project)
	if walArchive != "" {
		opts += " --archive " + quote(walArchive)
	}
	return base + " push" + opts + " '%p' '%f'", base + " fetch" + opts + " '%f' '%p'", nil
}

func quoteAll(words ...string) string {
	q := make([]string, len(words))
	for i, w := range words {
		q[i] = quote(w)
	}
	return strings.Join(q, " ")
}

// quote is w as one sh word, with % doubled for archive_command and restore_command.
func quote(w string) string {
	return "'" + strings.ReplaceAll(strings.ReplaceAll(w, "%", "%%"), "'", `'\''`) + "'"
}

// InstallProgram copies the running program to dst (made mode 0755, with its directory 0755), through a
// temporary file renamed into place, so that a command line naming dst always finds a whole program, the
// one that runs now (a `go run` binary is removed when it exits). It returns dst.
func InstallProgram(dst string) (string, error) {
	self, err := os.Executable()
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return "", err
	}
	if err := os.Chmod(filepath.Dir(dst), 0o755); err != nil {
		return "", err
	}
	src, err := os.Open(self)
	if err != nil {
		return "", err
	}
	defer src.Close()
	tmp, err := os.CreateTemp(filepath.Dir(dst), "."+filepath.Base(dst)+".tmp-*")
	if err != nil {
		return "", err
	}
	_, err = io.Copy(tmp, src)
	if err == nil {
		err = tmp.Chmod(0o755)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), dst)
	}
	if err != nil {
		os.Remove(tmp.Name())
		return "", fmt.Errorf("install the program for PostgreSQL's WAL commands: %w", err)
	}
	return dst, nil
}
