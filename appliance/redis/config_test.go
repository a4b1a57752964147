package redis_test

import (
	"context"
	. "github.com/theappliance/appliance/appliance/redis"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/theappliance/appliance/appliance/appliancetest"
	"github.com/theappliance/appliance/appliance/daemon"
)

// startServer starts a store's server in a temp dir as the instances' OS user; the test's end removes it.
func startServer(t *testing.T) (srv *Server, token, admin string) {
	t.Helper()
	user, err := daemon.DefaultOSUser()
	if err != nil {
		t.Fatal(err)
	}
	token, admin = "tok_"+strconv.FormatInt(time.Now().UnixNano(), 36), "adm_"+strconv.FormatInt(time.Now().UnixNano(), 36)
	srv = &Server{ID: "kv_test", User: user, Config: Config{Dir: filepath.Join(appliancetest.TraversableTempDir(t), "kv"),
		MaxMemoryMB: 16, TokenHash: Hash(token), AdminHash: Hash(admin)}}
	if err := srv.Start(t.Context(), nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := srv.Remove(context.Background()); err != nil {
			t.Error(err)
		}
	})
	return srv, token, admin
}

// cli runs redis-cli against the socket as user with password and returns its output.
func cli(t *testing.T, c Config, user, password string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	base := []string{"-s", c.SocketPath(), "--no-auth-warning"}
	if user != "" {
		base = append(base, "--user", user, "--pass", password)
	}
	out, _ := exec.CommandContext(ctx, "redis-cli", append(base, args...)...).CombinedOutput()
	return strings.TrimSpace(string(out))
}

// TestACLs runs a real redis-server with Conf and ACL: the tenant's token works for data commands and for
// what a store's user expects (FLUSHDB, KEYS, INFO, CLIENT SETNAME), Redis itself refuses what would change
// or stop the server, the default user is off, and only hashes are on disk.
func TestACLs(t *testing.T) {
	t.Parallel()
	srv, token, admin := startServer(t)
	c := srv.Config
	for _, c2 := range []struct {
		args []string
		want string
	}{
		{[]string{"SET", "k", "v"}, "OK"},
		{[]string{"GET", "k"}, "v"},
		{[]string{"KEYS", "*"}, "k"},
		{[]string{"CLIENT", "SETNAME", "app"}, "OK"},
		{[]string{"CONFIG", "GET", "maxmemory"}, "NOPERM"},
		{[]string{"CONFIG", "SET", "maxmemory", "0"}, "NOPERM"},
		{[]string{"SHUTDOWN"}, "NOPERM"},
		{[]string{"DEBUG", "SLEEP", "0"}, "not allowed"}, // enable-debug-command no, before the ACL
		{[]string{"MODULE", "LIST"}, "NOPERM"},
		{[]string{"REPLICAOF", "127.0.0.1", "1"}, "NOPERM"},
		{[]string{"ACL", "SETUSER", "tenant", "+@all"}, "NOPERM"},
		{[]string{"BGSAVE"}, "NOPERM"},
		{[]string{"MONITOR"}, "NOPERM"},
		{[]string{"CLIENT", "KILL", "USER", "appliance"}, "NOPERM"},
		{[]string{"FLUSHDB"}, "OK"},
		{[]string{"DBSIZE"}, "0"},
	} {
		if got := cli(t, c, TenantUser, token, c2.args...); !strings.Contains(got, c2.want) {
			t.Errorf("tenant %v: %q, want %q", c2.args, got, c2.want)
		}
	}
	if got := cli(t, c, TenantUser, token, "INFO", "server"); !strings.Contains(got, "redis_version:") {
		t.Errorf("tenant INFO: %q", got)
	} else if strings.Contains(got, c.Dir) || strings.Contains(got, "redis.conf") {
		t.Errorf("tenant INFO server shows the appliance's paths: %q", got)
	}
	if got := cli(t, c, TenantUser, "wrong", "PING"); !strings.Contains(got, "WRONGPASS") {
		t.Errorf("a wrong token: %q", got)
	}
	if got := cli(t, c, "", "", "PING"); !strings.Contains(got, "NOAUTH") && !strings.Contains(got, "NOPERM") {
		t.Errorf("the default user: %q", got)
	}
	if got := cli(t, c, AdminUser, admin, "CONFIG", "GET", "maxmemory"); !strings.Contains(got, strconv.Itoa(16<<20)) {
		t.Errorf("maxmemory: %q", got)
	}
	acl, _ := os.ReadFile(c.ACLPath())
	if strings.Contains(string(acl), token) || strings.Contains(string(acl), admin) {
		t.Error("a secret in plain text in users.acl")
	}
}
