package store

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/theappliance/appliance/store/etcdembed"
)

// The store's tests run on both backends: bbolt (a file in t.TempDir()) and etcd (a single-member server
// embedded in the test binary, started once for the package's run, with a fresh key prefix per store).

var backends = []string{"bbolt", "etcd"}

var testEtcd struct {
	once   sync.Once
	dir    string
	server *etcdembed.Server
	client *clientv3.Client // over the member's URL, as another node's process
	local  *clientv3.Client // the member's in process (LocalKV), as a node's store uses it: the stores'
	err    error
	n      atomic.Int64 // the prefixes handed out
}

func TestMain(m *testing.M) {
	code := m.Run()
	if testEtcd.server != nil {
		testEtcd.client.Close()
		testEtcd.server.Stop()
	}
	if testEtcd.dir != "" {
		os.RemoveAll(testEtcd.dir)
	}
	os.Exit(code)
}

// etcdServer is the package's etcd member, started at the first call.
func etcdServer(t testing.TB) *etcdembed.Server {
	t.Helper()
	testEtcd.once.Do(func() {
		if testEtcd.dir, testEtcd.err = os.MkdirTemp("", "store-etcd-"); testEtcd.err != nil {
			return
		}
		testEtcd.server, testEtcd.err = etcdembed.Start(context.Background(), etcdembed.Config{Dir: filepath.Join(testEtcd.dir, "member"), LogLevel: "fatal"})
		if testEtcd.err != nil {
			return
		}
		if testEtcd.client, testEtcd.err = testEtcd.server.Client(); testEtcd.err == nil {
			testEtcd.local = testEtcd.server.LocalKV(testEtcd.client)
		}
	})
	if testEtcd.err != nil {
		t.Fatal(testEtcd.err)
	}
	return testEtcd.server
}

// openEtcdNode opens the store under prefix on the package's member as a node's (through LocalKV),
// closed when the test ends: several on one prefix are several nodes' stores.
func openEtcdNode(t *testing.T, prefix string) *DB {
	t.Helper()
	db, err := OpenEtcd(testEtcd.local, prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// newEtcdPrefix is a key prefix no other test's store uses.
func newEtcdPrefix() string { return fmt.Sprintf("/test/%d/", testEtcd.n.Add(1)) }

// openBackend opens an empty store on the backend, closed when the test ends.
func openBackend(t testing.TB, backend string) *DB {
	t.Helper()
	var db *DB
	var err error
	switch backend {
	case "bbolt":
		db, err = Open(filepath.Join(t.TempDir(), "meta.db"))
	case "etcd":
		etcdServer(t)
		db, err = OpenEtcd(testEtcd.local, newEtcdPrefix())
	default:
		t.Fatalf("no backend %q", backend)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// onBackends runs f as a subtest on each backend with an empty store.
func onBackends(t *testing.T, f func(t *testing.T, db *DB)) {
	for _, b := range backends {
		t.Run(b, func(t *testing.T) { f(t, openBackend(t, b)) })
	}
}
