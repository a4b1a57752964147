package acceptance

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/theappliance/appliance/appliance/appliancetest"
	"github.com/theappliance/appliance/store"
)

// TestClusterSnapshotByAJoinedLeader: a single appliance with a bucket shows its recovery key, becomes
// node 1 of a cluster of three; the nodes that joined were handed that key (their recovery.key is node
// 1's, and they show none of their own). Node 1 stopped, a joined node leads: it takes the metadata
// snapshots of the cluster's store into the bucket (its /status row says so), sealed with that key: an API
// key made through node 2 after node 1 stopped is in a snapshot, and `appliance recover` with the key node
// 1 showed at its first start restores the metadata with it into a new data directory, where up starts a
// single appliance that lists that key.
func TestClusterSnapshotByAJoinedLeader(t *testing.T) {
	t.Parallel()
	bk := e2eBucket(t)
	bin := e2eBuild(t)
	dirs := make([]string, 3)
	for i := range dirs {
		dirs[i] = appliancetest.TraversableTempDir(t)
		d := dirs[i]
		t.Cleanup(func() { e2eKillUnder(t, d) })
	}
	a1, recoveryKey, keyFile := bk.start(t, bin, dirs[0])
	admin := e2eAdminKey(t, dirs[0])
	a1.stop(t, syscall.SIGTERM)
	procs := clusterOfThree(t, bin, dirs, bk.env, append([]string{"--spare-clusters", "0"}, bk.flags()...), bk.flags())
	for i, p := range procs[1:] {
		if strings.Contains(p.stdout.String(), "recovery_key") {
			t.Fatalf("node %d, which joined, showed a recovery key of its own:\n%s", i+2, p.stdout)
		}
		b, err := os.ReadFile(filepath.Join(dirs[i+1], "recovery.key"))
		if err != nil || strings.TrimSpace(string(b)) != recoveryKey {
			t.Fatalf("node %d's recovery.key: %v %q, want node 1's", i+2, err, b)
		}
		if st, err := os.Stat(filepath.Join(dirs[i+1], "recovery.key")); err != nil || st.Mode().Perm() != 0o600 {
			t.Fatalf("node %d's recovery.key: %v, mode %v", i+2, err, st.Mode())
		}
		if strings.Contains(p.stderr.String(), recoveryKey) {
			t.Fatalf("node %d logged the recovery key", i+2)
		}
	}
	if strings.Contains(procs[0].stderr.String(), recoveryKey) {
		t.Fatal("node 1 logged the recovery key")
	}

	// Node 1 leads (it started first): the others take no snapshot.
	for i, p := range procs[1:] {
		if c := p.component(t, "metadata-snapshots"); !strings.Contains(c, "does not lead") {
			t.Fatalf("node %d's metadata-snapshots row while node 1 leads: %q", i+2, c)
		}
	}

	// Node 1 stopped: node 2 or 3 leads, and takes the snapshots.
	procs[0].stop(t, syscall.SIGTERM)
	leader := -1
	e2eEventually(t, 2*time.Minute, "a joined node taking the metadata snapshots", func() (bool, string) {
		var msgs []string
		for i, p := range procs[1:] {
			c := p.component(t, "metadata-snapshots")
			msgs = append(msgs, c)
			if strings.Contains(c, "last snapshot") {
				leader = i + 1
				return true, c
			}
		}
		return false, strings.Join(msgs, " | ")
	})
	t.Logf("node %d leads and took a snapshot: %s", leader+1, procs[leader].component(t, "metadata-snapshots"))

	var boot struct {
		OrganizationID string `json:"organization_id"`
	}
	b, _ := os.ReadFile(filepath.Join(dirs[0], "bootstrap.json"))
	if err := json.Unmarshal(b, &boot); err != nil || boot.OrganizationID == "" {
		t.Fatalf("bootstrap.json: %v %s", err, b)
	}
	made := time.Now().UTC()
	procs[1].do(t, admin, http.MethodPost, "/v1/organizations/"+boot.OrganizationID+"/api-keys",
		map[string]any{"name": "made-under-a-joined-leader", "scopes": []string{"projects:read"}}, http.StatusCreated, nil)
	e2eEventually(t, 2*time.Minute, "a snapshot taken after the API key was made", func() (bool, string) {
		newest, err := bk.newestSnapshot(t)
		if err != nil {
			return false, err.Error()
		}
		return newest > made.Format("20060102T150405.000000000Z"), "newest: " + newest
	})

	// recover with the key node 1 showed: the metadata with the API key made under the joined leader.
	recovered := appliancetest.TraversableTempDir(t)
	t.Cleanup(func() { e2eKillUnder(t, recovered) })
	out, err := bk.recover(t, 5*time.Minute, bin, recovered, keyFile)
	if err != nil || !strings.Contains(out, "recovered into") {
		t.Fatalf("recover with node 1's recovery key: %v\n%s", err, out)
	}
	db, err := store.OpenWith(filepath.Join(recovered, "meta.db"), store.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	var found bool
	if err := db.View(func(tx *store.Tx) error {
		keys, err := store.APIKeys.All(tx, func(k *store.APIKey) bool { return k.Name == "made-under-a-joined-leader" })
		found = len(keys) == 1
		return err
	}); err != nil {
		db.Close()
		t.Fatal(err)
	}
	db.Close() // the file is up's next
	if !found {
		t.Fatalf("the recovered metadata lacks the API key made while node %d led:\n%s", leader+1, out)
	}
	if got, _ := os.ReadFile(filepath.Join(recovered, "recovery.key")); strings.TrimSpace(string(got)) != recoveryKey {
		t.Fatalf("the recovered data directory's recovery key is not node 1's")
	}

	// up on it, as recover says: a single appliance that answers the cluster's credentials.
	a := e2eStartWith(t, bin, recovered, bk.env, bk.flags())
	var keys struct {
		APIKeys []struct {
			Name string `json:"name"`
		} `json:"api_keys"`
	}
	a.do(t, admin, http.MethodGet, "/v1/organizations/"+boot.OrganizationID+"/api-keys", nil, http.StatusOK, &keys)
	found = false
	for _, k := range keys.APIKeys {
		found = found || k.Name == "made-under-a-joined-leader"
	}
	if !found {
		t.Fatalf("the recovered appliance lists no API key made under the joined leader: %+v", keys)
	}
	a.stop(t, syscall.SIGTERM)
}
