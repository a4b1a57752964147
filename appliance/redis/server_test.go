package redis_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	. "github.com/theappliance/appliance/appliance/redis"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/theappliance/appliance/appliance/daemon"
)

// TestServerLifecycle: a clean stop keeps the data (RDB) for the next start; the supervisor starts a
// killed server again; Remove leaves neither process nor files.
func TestServerLifecycle(t *testing.T) {
	t.Parallel()
	srv, token, _ := startServer(t)
	if got := cli(t, srv.Config, TenantUser, token, "SET", "kept", "yes"); got != "OK" {
		t.Fatalf("SET: %q", got)
	}
	if err := srv.Stop(t.Context(), nil, daemon.StopFast); err != nil {
		t.Fatal(err)
	}
	if _, running, _ := srv.Status(); running {
		t.Fatal("running after Stop")
	}
	if err := srv.Start(t.Context(), nil); err != nil {
		t.Fatal(err)
	}
	if got := cli(t, srv.Config, TenantUser, token, "GET", "kept"); got != "yes" {
		t.Fatalf("after a restart: %q", got)
	}

	sup := daemon.NewSupervisor()
	sup.Interval = 50 * time.Millisecond
	events := make(chan daemon.Event, 10)
	sup.OnEvent = func(e daemon.Event) { events <- e }
	t.Cleanup(func() { sup.Stop(context.Background()) })
	if err := sup.Watch(srv.ID, srv); err != nil {
		t.Fatal(err)
	}
	pid, _, _ := srv.Status()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for deadline := time.After(30 * time.Second); ; {
		select {
		case e := <-events:
			if e.Kind != daemon.EventRestarted {
				continue
			}
		case <-deadline:
			t.Fatal("not restarted")
		}
		break
	}
	if got := cli(t, srv.Config, TenantUser, token, "GET", "kept"); got != "yes" {
		t.Fatalf("after the supervisor's restart: %q", got)
	}
	sup.Unwatch(srv.ID)
	newPID, _, _ := srv.Status()
	if err := srv.Remove(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(srv.Dir); !os.IsNotExist(err) {
		t.Fatalf("directory left: %v", err)
	}
	if daemon.ReadProcess(newPID) != nil {
		t.Fatal("process left")
	}
}

// TestRotateToken: after a rotation the old token fails at once, a connection logged in with it is cut
// off, and the new token works; the data stays.
func TestRotateToken(t *testing.T) {
	t.Parallel()
	srv, token, admin := startServer(t)
	if got := cli(t, srv.Config, TenantUser, token, "SET", "k", "v"); got != "OK" {
		t.Fatalf("SET: %q", got)
	}
	conn, err := net.Dial("unix", srv.SocketPath())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	r := bufio.NewReader(conn)
	fmt.Fprintf(conn, "AUTH %s %s\r\nPING\r\n", TenantUser, token)
	for _, want := range []string{"+OK", "+PONG"} {
		if line, _ := r.ReadString('\n'); strings.TrimSpace(line) != want {
			t.Fatalf("old connection: %q, want %s", line, want)
		}
	}
	fresh := "tok_rotated"
	if err := srv.RotateToken(t.Context(), admin, Hash(fresh)); err != nil {
		t.Fatal(err)
	}
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(conn, "PING\r\n")
	if line, err := r.ReadString('\n'); err == nil {
		t.Fatalf("the connection logged in with the old token still answers: %q", line)
	}
	if got := cli(t, srv.Config, TenantUser, token, "PING"); !strings.Contains(got, "WRONGPASS") {
		t.Fatalf("the old token: %q", got)
	}
	if got := cli(t, srv.Config, TenantUser, fresh, "GET", "k"); got != "v" {
		t.Fatalf("the new token: %q", got)
	}
	// A restart writes users.acl from the Config, which now holds the new hash.
	if err := srv.Stop(t.Context(), nil, daemon.StopFast); err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(t.Context(), nil); err != nil {
		t.Fatal(err)
	}
	if got := cli(t, srv.Config, TenantUser, fresh, "GET", "k"); got != "v" {
		t.Fatalf("the new token after a restart: %q", got)
	}
	if got := cli(t, srv.Config, TenantUser, token, "PING"); !strings.Contains(got, "WRONGPASS") {
		t.Fatalf("the old token after a restart: %q", got)
	}
	if _, err := srv.Admin(t.Context(), "wrong", []string{"PING"}); err == nil || !strings.Contains(err.Error(), "WRONGPASS") {
		t.Fatalf("Admin with a wrong password: %v", err)
	}
}

// TestServerSeed: a server whose directory has no dump.rdb starts from what Seed writes (owned by the OS
// user); a Seed that fails, even after writing part of a file, fails the start and leaves no dump.rdb;
// Seed saying it has nothing starts the server empty; an existing dump.rdb is never replaced (Seed is not
// even asked).
func TestServerSeed(t *testing.T) {
	t.Parallel()
	srv, token, admin := startServer(t)
	if got := cli(t, srv.Config, TenantUser, token, "SET", "seeded", "yes"); got != "OK" {
		t.Fatalf("SET: %q", got)
	}
	if got := cli(t, srv.Config, AdminUser, admin, "SAVE"); got != "OK" {
		t.Fatalf("SAVE: %q", got)
	}
	rdb, err := os.ReadFile(srv.RDBPath())
	if err != nil {
		t.Fatal(err)
	}
	restart := func(seed func(context.Context, io.Writer) (bool, error)) error {
		t.Helper()
		if err := srv.Stop(t.Context(), nil, daemon.StopImmediate); err != nil {
			t.Fatal(err)
		}
		if err := os.Remove(srv.RDBPath()); err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
		srv.Seed = seed
		return srv.Start(t.Context(), nil)
	}
	noFile := func(when string) {
		t.Helper()
		for _, p := range []string{srv.RDBPath(), srv.RDBPath() + ".seed"} {
			if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("%s: %s exists: %v", when, p, err)
			}
		}
		if _, running, _ := srv.Status(); running {
			t.Fatalf("%s: running", when)
		}
	}
	if err := restart(func(context.Context, io.Writer) (bool, error) { return false, errors.New("bucket away") }); err == nil || !strings.Contains(err.Error(), "bucket away") {
		t.Fatalf("a failing seed: %v", err)
	}
	noFile("a failing seed")
	if err := restart(func(_ context.Context, w io.Writer) (bool, error) {
		w.Write(rdb[:len(rdb)/2])
		return false, errors.New("truncated")
	}); err == nil {
		t.Fatal("a seed failing midway started the server")
	}
	noFile("a seed failing midway")

	if err := restart(func(_ context.Context, w io.Writer) (bool, error) { _, err := w.Write(rdb); return true, err }); err != nil {
		t.Fatal(err)
	}
	if got := cli(t, srv.Config, TenantUser, token, "GET", "seeded"); got != "yes" {
		t.Fatalf("after a seeded start: %q", got)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(srv.RDBPath(), &st); err != nil || st.Uid != srv.User.UID || st.Mode&0o777 != 0o600 {
		t.Fatalf("the seeded file: uid %d mode %o, %v", st.Uid, st.Mode&0o777, err)
	}

	if err := restart(func(context.Context, io.Writer) (bool, error) { return false, nil }); err != nil {
		t.Fatal(err)
	}
	if got := cli(t, srv.Config, TenantUser, token, "DBSIZE"); got != "0" {
		t.Fatalf("nothing to seed: DBSIZE %q", got)
	}
	if got := cli(t, srv.Config, TenantUser, token, "SET", "local", "yes"); got != "OK" {
		t.Fatalf("SET: %q", got)
	}
	if err := srv.Stop(t.Context(), nil, daemon.StopFast); err != nil { // saves dump.rdb
		t.Fatal(err)
	}
	srv.Seed = func(context.Context, io.Writer) (bool, error) {
		t.Error("Seed asked while dump.rdb exists")
		return false, nil
	}
	if err := srv.Start(t.Context(), nil); err != nil {
		t.Fatal(err)
	}
	if got := cli(t, srv.Config, TenantUser, token, "GET", "local"); got != "yes" {
		t.Fatalf("the local dump.rdb: %q", got)
	}
}
