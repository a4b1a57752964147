package acceptance

import (
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/theappliance/appliance/appliance"
	"github.com/theappliance/appliance/appliance/appliancetest"
)

// TestUpOperators: the first start says how to make an operator; `up --operator-email` makes one (its
// password printed once); `appliance operators add`, run beside the running appliance (whose store is
// locked), makes another through the admin socket. Both sign in with no organization and list the
// organizations; the bootstrap owner may not.
func TestUpOperators(t *testing.T) {
	t.Parallel()
	bin := e2eBuild(t)
	dataDir := appliancetest.TraversableTempDir(t)
	p := e2eStartWith(t, bin, dataDir, nil, []string{"--operator-email", "first@example.com", "--spare-clusters", "0"})
	out := p.stdout.String()
	if !strings.Contains(out, "sudo appliance operators add you@example.com") {
		t.Fatalf("the first start does not say how to make an operator:\n%s", out)
	}
	m := regexp.MustCompile(`Created first@example\.com \(usr_\S+\), a platform operator\. Their password follows; it is shown only this once\.\n(\S+)\n`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("up --operator-email printed no password:\n%s", out)
	}
	var stdout, stderr bytes.Buffer
	add := exec.Command(bin, "operators", "add", "second@example.com", "--data-dir", dataDir)
	add.Stdout, add.Stderr = &stdout, &stderr
	if err := add.Run(); err != nil {
		t.Fatalf("operators add beside a running appliance: %v\n%s", err, stderr.String())
	}
	signIn := func(email, password string) (int, map[string]any) {
		t.Helper()
		body, _ := json.Marshal(map[string]string{"email": email, "password": password})
		res, err := p.client.Post(p.api+"/v1/auth/sessions", "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var v map[string]any
		json.NewDecoder(res.Body).Decode(&v)
		return res.StatusCode, v
	}
	list := func(token string) int {
		t.Helper()
		req, _ := http.NewRequest("GET", p.api+"/v1/organizations", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		res, err := p.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	for email, password := range map[string]string{"first@example.com": m[1], "second@example.com": strings.TrimSpace(stdout.String())} {
		st, v := signIn(email, password)
		if st != http.StatusCreated || v["organization_id"] != "" {
			t.Fatalf("%s signs in: %d %v", email, st, v)
		}
		if st := list(v["token"].(string)); st != http.StatusOK {
			t.Fatalf("%s lists the organizations: %d", email, st)
		}
	}
	raw, err := os.ReadFile(filepath.Join(dataDir, "bootstrap.json"))
	if err != nil {
		t.Fatal(err)
	}
	var boot appliance.Bootstrap
	if err := json.Unmarshal(raw, &boot); err != nil {
		t.Fatal(err)
	}
	st, v := signIn(boot.Email, boot.Password)
	if st != http.StatusCreated {
		t.Fatalf("the owner signs in: %d %v", st, v)
	}
	if st := list(v["token"].(string)); st != http.StatusForbidden {
		t.Fatalf("the owner lists the organizations: %d", st)
	}
}
