package kvproxy_test

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/theappliance/appliance/appliance"
	"github.com/theappliance/appliance/appliance/appliancetest"
	kvarea "github.com/theappliance/appliance/appliance/kv"
	"github.com/theappliance/appliance/kvproxy"
	"github.com/theappliance/appliance/scheduler"
	"github.com/theappliance/appliance/store"
)

// kvEnv is an appliance with a data plane and both key-value fronts, as `appliance up` runs them.
type kvEnv struct {
	*appliancetest.Env
	p    *appliance.Principal
	resp *kvproxy.Server
	rest *kvproxy.REST
}

func newKVEnv(t *testing.T) *kvEnv {
	t.Helper()
	return newKVEnvWith(t, appliancetest.Options{})
}

// newKVEnvWith is newKVEnv with more options (Instances and KVFronts are set).
func newKVEnvWith(t *testing.T, o appliancetest.Options) *kvEnv {
	t.Helper()
	o.Instances = true
	e := appliancetest.New(t, o)
	p, err := e.Svc.Identity().Authenticate(t.Context(), e.Bootstrap.APIKey)
	if err != nil {
		t.Fatal(err)
	}
	f := e.StartKVFronts(t)
	k := &kvEnv{Env: e, p: p, resp: f.RESP, rest: f.REST}
	return k
}

// project provisions a project.
func (k *kvEnv) project(t *testing.T, name string) string {
	t.Helper()
	res, err := k.Svc.CreateProject(t.Context(), k.p, &appliance.CreateProjectRequest{Name: name, Environment: "development"})
	if err != nil {
		t.Fatal(err)
	}
	k.wait(t, res.Job.ID)
	return res.Project.ID
}

func (k *kvEnv) wait(t *testing.T, jobID string) *store.Job {
	t.Helper()
	j := k.WaitJob(t, jobID)
	if j.State != scheduler.StateCompleted {
		t.Fatalf("job %s (%s) %s: %s", j.ID, j.Type, j.State, j.Error)
	}
	return j
}

// store creates a project's store and waits until it runs; it returns the store as created (with its
// token).
func (k *kvEnv) store(t *testing.T, projectID string) *appliance.KVStore {
	t.Helper()
	res, err := k.Svc.KV().Create(t.Context(), k.p, projectID)
	if err != nil {
		t.Fatal(err)
	}
	if res.KVStore.State != kvarea.StateProvisioning || res.KVStore.Token == nil {
		t.Fatalf("created: %+v", res.KVStore)
	}
	k.wait(t, res.Job.ID)
	got, err := k.Svc.KV().Get(t.Context(), k.p, projectID)
	if err != nil || got.State != kvarea.StateRunning || got.Token != nil {
		t.Fatalf("after the job: %+v, %v", got, err)
	}
	return res.KVStore
}

// client is a go-redis client of the RESP front (verify-full against the appliance CA).
func (k *kvEnv) client(t *testing.T, token string, proto int) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: k.resp.ListenAddr(), Password: token, Protocol: proto,
		TLSConfig: &tls.Config{RootCAs: k.CA.Pool(), ServerName: "localhost"}, MaxRetries: -1, DisableIdentity: false})
	t.Cleanup(func() { c.Close() })
	return c
}

func wantErr(t *testing.T, err error, prefix string) {
	t.Helper()
	if err == nil || !strings.HasPrefix(err.Error(), prefix) {
		t.Fatalf("want an error starting %q, got %v", prefix, err)
	}
}

// TestRESPFrontBehavesAsRedis: through the TLS front, with RESP2 and RESP3, what a Redis client does works
// as on Redis: pipelining, transactions with WATCH, blocking commands, pub/sub, client names, large
// values; commands that would change or stop the server are refused by the store's ACLs; a wrong token is
// WRONGPASS, a command before AUTH is NOAUTH; redis-cli --tls works with the printed credentials.
func TestRESPFrontBehavesAsRedis(t *testing.T) {
	t.Parallel()
	k := newKVEnv(t)
	kv := k.store(t, k.project(t, "cache"))
	token := *kv.Token
	ctx := t.Context()
	for _, proto := range []int{2, 3} {
		t.Run(fmt.Sprintf("RESP%d", proto), func(t *testing.T) {
			c := k.client(t, token, proto)
			key := func(s string) string { return fmt.Sprintf("p%d:%s", proto, s) }
			if err := c.Set(ctx, key("a"), "1", 0).Err(); err != nil {
				t.Fatal(err)
			}
			if v, err := c.Get(ctx, key("a")).Result(); err != nil || v != "1" {
				t.Fatalf("GET: %q %v", v, err)
			}
			if proto == 3 {
				hello, err := c.Do(ctx, "HELLO", "3").Result()
				if err != nil {
					t.Fatal(err)
				}
				if m, ok := hello.(map[any]any); !ok || m["proto"] != int64(3) {
					t.Fatalf("HELLO 3 answered %#v", hello)
				}
			}
			// Pipelining: 200 commands in one round trip.
			cmds, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
				for i := range 200 {
					p.Incr(ctx, key("n"))
					_ = i
				}
				return nil
			})
			if err != nil || len(cmds) != 200 || cmds[199].(*redis.IntCmd).Val() != 200 {
				t.Fatalf("pipeline: %d commands, %v", len(cmds), err)
			}
			// WATCH/MULTI/EXEC: a transaction whose watched key changed fails.
			err = c.Watch(ctx, func(tx *redis.Tx) error {
				if err := k.client(t, token, proto).Set(ctx, key("w"), "other", 0).Err(); err != nil {
					return err
				}
				_, err := tx.TxPipelined(ctx, func(p redis.Pipeliner) error { p.Set(ctx, key("w"), "mine", 0); return nil })
				return err
			}, key("w"))
			if !errors.Is(err, redis.TxFailedErr) {
				t.Fatalf("WATCH: want TxFailedErr, got %v", err)
			}
			if _, err := c.TxPipelined(ctx, func(p redis.Pipeliner) error {
				p.Set(ctx, key("t1"), "x", 0)
				p.Set(ctx, key("t2"), "y", 0)
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			// BLPOP waits until another connection pushes.
			got := make(chan []string, 1)
			go func() {
				v, _ := k.client(t, token, proto).BLPop(ctx, 10*time.Second, key("q")).Result()
				got <- v
			}()
			time.Sleep(200 * time.Millisecond)
			if err := c.RPush(ctx, key("q"), "job").Err(); err != nil {
				t.Fatal(err)
			}
			if v := <-got; len(v) != 2 || v[1] != "job" {
				t.Fatalf("BLPOP: %v", v)
			}
			// Pub/sub.
			sub := k.client(t, token, proto).Subscribe(ctx, key("ch"))
			if _, err := sub.Receive(ctx); err != nil {
				t.Fatal(err)
			}
			if err := c.Publish(ctx, key("ch"), "hello").Err(); err != nil {
				t.Fatal(err)
			}
			msg, err := sub.ReceiveMessage(ctx)
			if err != nil || msg.Payload != "hello" {
				t.Fatalf("pub/sub: %+v %v", msg, err)
			}
			sub.Close()
			// CLIENT SETNAME on a single connection.
			conn := c.Conn()
			if err := conn.ClientSetName(ctx, "worker-1").Err(); err != nil {
				t.Fatal(err)
			}
			if n, err := conn.ClientGetName(ctx).Result(); err != nil || n != "worker-1" {
				t.Fatalf("CLIENT GETNAME: %q %v", n, err)
			}
			conn.Close()
			// A large value.
			big := strings.Repeat("0123456789abcdef", 512<<10) // 8 MiB
			if err := c.Set(ctx, key("big"), big, 0).Err(); err != nil {
				t.Fatal(err)
			}
			if v, err := c.Get(ctx, key("big")).Result(); err != nil || v != big {
				t.Fatalf("large value: %d bytes back, %v", len(v), err)
			}
			c.Del(ctx, key("big"))
			// The store's server refuses what would change or stop it: its ACLs (NOPERM), and for DEBUG and MODULE
			// its configuration too.
			for _, cmd := range [][]any{{"CONFIG", "GET", "maxmemory"}, {"CONFIG", "SET", "maxmemory", "0"}, {"SHUTDOWN"},
				{"DEBUG", "SLEEP", "0"}, {"MODULE", "LIST"}, {"REPLICAOF", "127.0.0.1", "1"}, {"SLAVEOF", "NO", "ONE"},
				{"ACL", "LIST"}, {"ACL", "SETUSER", "tenant", "+@all"}, {"SAVE"}, {"BGSAVE"}, {"BGREWRITEAOF"},
				{"CLIENT", "KILL", "USER", "appliance"}, {"MIGRATE", "127.0.0.1", "1", "k", "0", "1"}} {
				err := c.Do(ctx, cmd...).Err()
				if err == nil || !(strings.HasPrefix(err.Error(), "NOPERM") || strings.Contains(err.Error(), "command not allowed")) {
					t.Fatalf("%v: want it refused by the server, got %v", cmd, err)
				}
			}
			// MONITOR is refused too (go-redis has no plain Do for it: a raw connection below checks it).
		})
	}

	// Raw protocol: NOAUTH before AUTH, WRONGPASS for a wrong token, MONITOR refused, inline commands.
	d := tls.Dialer{Config: &tls.Config{RootCAs: k.CA.Pool(), ServerName: "localhost"}}
	nc, err := d.DialContext(ctx, "tcp", k.resp.ListenAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	raw := func(send, want string) {
		t.Helper()
		nc.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := nc.Write([]byte(send)); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 4096)
		got := ""
		for !strings.HasSuffix(got, "\r\n") {
			n, err := nc.Read(buf)
			if err != nil {
				t.Fatalf("after %q: %v (got %q)", send, err, got)
			}
			got += string(buf[:n])
		}
		if !strings.HasPrefix(got, want) {
			t.Fatalf("%q answered %q, want %q…", send, got, want)
		}
	}
	raw("PING\r\n", "-NOAUTH Authentication required.")
	raw("*2\r\n$3\r\nGET\r\n$1\r\nx\r\n", "-NOAUTH")
	raw("*2\r\n$5\r\nHELLO\r\n$1\r\n3\r\n", "-NOAUTH HELLO must be called")
	raw("AUTH kv_wrong\r\n", "-WRONGPASS invalid username-password pair")
	raw("*3\r\n$4\r\nAUTH\r\n$7\r\ndefault\r\n$"+strconv.Itoa(len(token))+"\r\n"+token+"\r\n*1\r\n$4\r\nPING\r\n", "+OK\r\n+PONG\r\n")
	raw("MONITOR\r\n", "-NOPERM")

	// redis-cli with the TLS flags `appliance kv cli` passes.
	out, err := exec.CommandContext(ctx, "redis-cli", "--tls", "--cacert", k.CA.CertPath(), "-h", "localhost",
		"-p", strconv.Itoa(kv.Credentials.RedisPort), "--no-auth-warning", "--user", "default", "--pass", token,
		"SET", "from-cli", "yes").CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "OK" {
		t.Fatalf("redis-cli: %s %v", out, err)
	}
	out, err = exec.CommandContext(ctx, "redis-cli", "--tls", "--cacert", k.CA.CertPath(), "--no-auth-warning", "-u", kv.Credentials.RedisURL, "GET", "from-cli").CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "yes" {
		t.Fatalf("redis-cli -u %s: %s %v", strings.Replace(kv.Credentials.RedisURL, token, "…", 1), out, err)
	}
}

// TestTokensIsolateAndRotationCutsConnections: a token of one store never reaches another's keys; a
// rotation makes the old token fail at once and cuts a live connection and a subscribed one.
func TestTokensIsolateAndRotationCutsConnections(t *testing.T) {
	t.Parallel()
	k := newKVEnv(t)
	a := k.store(t, k.project(t, "alpha"))
	bPrj := k.project(t, "beta")
	b := k.store(t, bPrj)
	ctx := t.Context()
	ca, cb := k.client(t, *a.Token, 2), k.client(t, *b.Token, 3)
	if err := ca.Set(ctx, "secret", "of-a", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := cb.Get(ctx, "secret").Err(); !errors.Is(err, redis.Nil) {
		t.Fatalf("store B sees A's key: %v", err)
	}
	if n, _ := cb.DBSize(ctx).Result(); n != 0 {
		t.Fatalf("store B holds %d keys", n)
	}

	// Live connections made with B's token: a plain one and a subscribed one.
	live := cb.Conn()
	defer live.Close()
	if err := live.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	sub := cb.Subscribe(ctx, "news")
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	res, err := k.Svc.KV().RotateToken(ctx, k.p, bPrj)
	if err != nil {
		t.Fatal(err)
	}
	if res.KVStore.Token == nil || *res.KVStore.Token == *b.Token || res.KVStore.TokenPrefix == b.TokenPrefix {
		t.Fatalf("rotation answered %+v", res.KVStore)
	}
	if err := live.Ping(ctx).Err(); err == nil {
		t.Fatal("a connection made with the old token still works after the rotation")
	}
	if _, err := sub.ReceiveTimeout(ctx, 5*time.Second); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("the subscribed connection was not cut: %v", err)
	}
	wantErr(t, k.client(t, *b.Token, 2).Ping(ctx).Err(), "WRONGPASS")
	nb := k.client(t, *res.KVStore.Token, 3)
	if err := nb.Ping(ctx).Err(); err != nil {
		t.Fatalf("the new token: %v", err)
	}
	// A's token cannot log in to B's server even if it were routed there: only B's hash is in its ACL.
	if v, err := ca.Get(ctx, "secret").Result(); err != nil || v != "of-a" {
		t.Fatalf("store A after B's rotation: %q %v", v, err)
	}
}

// TestStoreLifecycle: a second create is a conflict; eviction removes only keys with a TTL; a flush
// deletes every key and keeps the token; a clean stop and start keeps the data; delete removes the
// server and its data, then a new store can be created.
func TestStoreLifecycle(t *testing.T) {
	t.Parallel()
	k := newKVEnv(t)
	prj := k.project(t, "life")
	kv := k.store(t, prj)
	ctx := t.Context()
	var ae *appliance.Error
	if _, err := k.Svc.KV().Create(ctx, k.p, prj); !errors.As(err, &ae) || ae.Kind != appliance.KindConflict {
		t.Fatalf("second create: %v", err)
	}
	usage := func() (int, int) {
		t.Helper()
		u, err := k.Svc.OrganizationUsage(ctx, k.p, k.p.OrganizationID)
		if err != nil {
			t.Fatal(err)
		}
		return u.Usage.Totals.KVStores, u.Usage.Totals.KVMemoryMB
	}
	if n, mb := usage(); n != 1 || mb != 32 {
		t.Fatalf("usage counts %d stores, %d MB", n, mb)
	}
	c := k.client(t, *kv.Token, 2)
	if kv.MaxmemoryMB != 32 || kv.MemMaxMB != 32 || kv.MaxmemoryPolicy != "volatile-lru" || kv.Persistence != "rdb" {
		t.Fatalf("store: %+v", kv)
	}
	// 12 MB that must stay, then 40 MB with a TTL: maxmemory (32 MB) evicts only the latter.
	val := strings.Repeat("x", 100<<10)
	fill := func(prefix string, n int, ttl time.Duration) {
		p := c.Pipeline()
		for i := range n {
			p.Set(ctx, fmt.Sprintf("%s:%d", prefix, i), val, ttl)
		}
		if _, err := p.Exec(ctx); err != nil {
			t.Fatalf("fill %s: %v", prefix, err)
		}
	}
	fill("keep", 120, 0)
	fill("ttl", 400, time.Hour)
	for i := range 120 {
		if err := c.Get(ctx, fmt.Sprintf("keep:%d", i)).Err(); err != nil {
			t.Fatalf("keep:%d was evicted: %v", i, err)
		}
	}
	ttlLeft := 0
	for i := range 400 {
		if c.Exists(ctx, fmt.Sprintf("ttl:%d", i)).Val() == 1 {
			ttlLeft++
		}
	}
	if ttlLeft == 400 || ttlLeft == 0 {
		t.Fatalf("%d of 400 keys with a TTL left: eviction did not run as volatile-lru", ttlLeft)
	}
	// Full of keys without a TTL: a write is refused rather than anything evicted.
	fillErr := func() error {
		for i := range 400 {
			if err := c.Set(ctx, fmt.Sprintf("more:%d", i), val, 0).Err(); err != nil {
				return err
			}
		}
		return nil
	}
	wantErr(t, fillErr(), "OOM")
	for i := range 120 {
		if err := c.Get(ctx, fmt.Sprintf("keep:%d", i)).Err(); err != nil {
			t.Fatalf("keep:%d was evicted when full: %v", i, err)
		}
	}

	// A plan change does not resize the store.
	pro := "pro"
	if _, err := k.Svc.PatchProject(ctx, k.p, prj, &appliance.PatchProjectRequest{Plan: &pro}); err != nil {
		t.Fatal(err)
	}
	if got, err := k.Svc.KV().Get(ctx, k.p, prj); err != nil || got.MaxmemoryMB != 32 {
		t.Fatalf("after the plan change: %+v %v", got, err)
	}

	// Flush: every key gone, the same token works.
	fl, err := k.Svc.KV().Flush(ctx, k.p, prj)
	if err != nil {
		t.Fatal(err)
	}
	k.wait(t, fl.Job.ID)
	if n, err := c.DBSize(ctx).Result(); err != nil || n != 0 {
		t.Fatalf("after flush: %d keys, %v", n, err)
	}

	// A clean stop and a start (what an appliance restart does) keep the data.
	if err := c.Set(ctx, "durable", "yes", 0).Err(); err != nil {
		t.Fatal(err)
	}
	c.Close()
	stopAll(t, k)
	if err := k.Svc.KV().Adopt(ctx); err != nil {
		t.Fatal(err)
	}
	c2 := k.client(t, *kv.Token, 3)
	waitFor(t, func() bool { v, _ := c2.Get(ctx, "durable").Result(); return v == "yes" })

	// Delete: the server, its socket and data are gone; then a new store can be created.
	dir := kvDir(t, k, prj)
	del, err := k.Svc.KV().Delete(ctx, k.p, prj)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := k.Svc.KV().Get(ctx, k.p, prj); got != nil && got.State != kvarea.StateDestroying {
		t.Fatalf("while deleting: %+v", got)
	}
	k.wait(t, del.Job.ID)
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the store's directory is still there: %v", err)
	}
	if len(appliancetest.ProcessesUnder(dir)) != 0 {
		t.Fatal("the store's server still runs")
	}
	wantErr(t, c2.Ping(ctx).Err(), "")
	if _, err := k.Svc.KV().Get(ctx, k.p, prj); !errors.As(err, &ae) || ae.Kind != appliance.KindNotFound {
		t.Fatalf("after delete: %v", err)
	}
	if n, _ := usage(); n != 0 {
		t.Fatalf("usage counts %d stores after the delete", n)
	}
	// The project's event log tells the store's life.
	page, err := k.Svc.Events().ProjectEvents(ctx, k.p, prj, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, ev := range page.Events {
		if strings.HasPrefix(ev.Type, "kv.") {
			kinds = append(kinds, ev.Type)
		}
	}
	if strings.Join(kinds, " ") != "kv.ready kv.deleted" {
		t.Fatalf("kv events: %v", kinds)
	}
	again := k.store(t, prj)
	if *again.Token == *kv.Token {
		t.Fatal("a new store has the old token")
	}
	if n, err := k.client(t, *again.Token, 2).DBSize(ctx).Result(); err != nil || n != 0 {
		t.Fatalf("the new store: %d keys, %v", n, err)
	}
}

// TestProjectDeleteRemovesItsStore: deleting a project removes its store with it: the server, its
// directory and the record; its token no longer resolves.
func TestProjectDeleteRemovesItsStore(t *testing.T) {
	k := newKVEnv(t)
	ctx := t.Context()
	prj := k.project(t, "doomed")
	kv := k.store(t, prj)
	c := k.client(t, *kv.Token, 2)
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	dir := kvDir(t, k, prj)
	del, err := k.Svc.DeleteProject(ctx, k.p, prj, "")
	if err != nil {
		t.Fatal(err)
	}
	k.wait(t, del.Job.ID)
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the store's directory is still there: %v", err)
	}
	if len(appliancetest.ProcessesUnder(dir)) != 0 {
		t.Fatal("the store's server still runs")
	}
	if err := k.DB.View(func(tx *store.Tx) error {
		_, err := store.KVStores.Get(tx, kv.ID)
		return err
	}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the store's record: %v", err)
	}
	if _, err := k.Svc.KV().ResolveToken(ctx, *kv.Token); !errors.Is(err, kvarea.ErrInvalidToken) {
		t.Fatalf("the token still resolves: %v", err)
	}
}

func kvDir(t *testing.T, k *kvEnv, projectID string) string {
	t.Helper()
	var dir string
	if err := k.DB.View(func(tx *store.Tx) error {
		r, err := store.KVStores.First(tx, store.KVStoresByProject, projectID)
		if err == nil {
			dir = r.Dir
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return dir
}

// stopAll stops every store's server cleanly, as an appliance shutting down does.
func stopAll(t *testing.T, k *kvEnv) {
	t.Helper()
	var dirs []string
	k.DB.View(func(tx *store.Tx) error {
		all, _ := store.KVStores.All(tx, nil)
		for _, r := range all {
			dirs = append(dirs, r.ID, r.Dir)
		}
		return nil
	})
	for i := 0; i < len(dirs); i += 2 {
		k.Sup.Unwatch("kv/" + dirs[i])
		pid, _ := os.ReadFile(dirs[i+1] + "/redis.pid")
		n, _ := strconv.Atoi(strings.TrimSpace(string(pid)))
		if n > 0 {
			p, _ := os.FindProcess(n)
			p.Signal(syscall.SIGTERM)
		}
		waitFor(t, func() bool { return len(appliancetest.ProcessesUnder(dirs[i+1])) == 0 })
	}
}

func waitFor(t *testing.T, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// While a store's server is being restarted, a client that authenticates waits for it and is then served;
// one whose store does not come back in time is told the store is unavailable and disconnected: never a
// WRONGPASS for a good token, nor NOAUTH for what it sent after its AUTH (F-L7).
func TestRESPFrontWaitsForARestartingStore(t *testing.T) {
	t.Parallel()
	k := newKVEnv(t)
	ctx := t.Context()
	kv := k.store(t, k.project(t, "restarting"))
	down := func() {
		t.Helper()
		stopAll(t, k) // as the supervisor sees a crash, before its restart
	}
	dial := func() (*tls.Conn, *bufio.Reader) {
		t.Helper()
		c, err := tls.Dial("tcp", k.resp.ListenAddr(), &tls.Config{RootCAs: k.CA.Pool(), ServerName: "localhost"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c, bufio.NewReader(c)
	}
	authPing := "*2\r\n$4\r\nAUTH\r\n$" + strconv.Itoa(len(*kv.Token)) + "\r\n" + *kv.Token + "\r\n*1\r\n$4\r\nPING\r\n"
	line := func(r *bufio.Reader) string {
		t.Helper()
		l, err := r.ReadString('\n')
		if err != nil {
			return "error: " + err.Error()
		}
		return strings.TrimSpace(l)
	}

	down()
	c, r := dial()
	if _, err := c.Write([]byte(authPing)); err != nil {
		t.Fatal(err)
	}
	// The supervisor starts it again (as at the appliance's start).
	if err := k.Svc.KV().Adopt(ctx); err != nil {
		t.Fatal(err)
	}
	if got, ping := line(r), line(r); got != "+OK" || ping != "+PONG" {
		t.Fatalf("AUTH and PING sent while the store restarted: %q %q", got, ping)
	}

	// A store that stays down (DefaultStoreWait): a clear error, then the connection ends.
	down()
	c, r = dial()
	if _, err := c.Write([]byte(authPing)); err != nil {
		t.Fatal(err)
	}
	if got := line(r); !strings.HasPrefix(got, "-ERR the key-value store is unavailable") {
		t.Fatalf("AUTH while the store is down: %q", got)
	}
	if got := line(r); !strings.HasPrefix(got, "error: ") {
		t.Fatalf("after the error, the connection must end; got %q", got)
	}
}
