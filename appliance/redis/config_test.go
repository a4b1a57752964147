package redis

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/theappliance/appliance/appliance/appliancetest"
	"github.com/theappliance/appliance/appliance/daemon"
)

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
	user, err := daemon.DefaultOSUser()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(appliancetest.TraversableTempDir(t), "kv")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	token, admin := "tok_"+strconv.FormatInt(time.Now().UnixNano(), 36), "adm_secret"
	c := Config{Dir: dir, MaxMemoryMB: 16, TokenHash: Hash(token), AdminHash: Hash(admin)}
	for path, data := range map[string][]byte{c.ConfPath(): c.Conf(), c.ACLPath(): c.ACL()} {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := user.Chown(dir); err != nil {
		t.Fatal(err)
	}
	start := user.Command("redis-server", c.ConfPath())
	if out, err := start.CombinedOutput(); err != nil {
		t.Fatalf("redis-server: %v %s", err, out)
	}
	t.Cleanup(func() {
		if b, err := os.ReadFile(c.PidPath()); err == nil {
			if pid, _ := strconv.Atoi(strings.TrimSpace(string(b))); pid > 0 {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
	for deadline := time.Now().Add(10 * time.Second); cli(t, c, AdminUser, admin, "PING") != "PONG"; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(dir, "redis.log"))
			t.Fatalf("redis-server never answered:\n%s", log)
		}
	}

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
