package cmd

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/theappliance/appliance/appliance"
)

// TestCLILocalAppliance: with no --api, environment or CLI config, the CLI uses the local appliance's
// bootstrap.json (the data directory up would use, APPLIANCE_DATA_DIR) and says so once on stderr;
// `appliance status` shows what it uses (the key's prefix, never the key) and the health. A bootstrap.json
// the caller must not trust (another user's, or writable by others) or cannot read is refused with the
// exact `appliance login` command instead.
func TestCLILocalAppliance(t *testing.T) {
	e := setupCLI(t)
	dataDir := t.TempDir()
	t.Setenv("APPLIANCE_DATA_DIR", dataDir)
	path := filepath.Join(dataDir, "bootstrap.json")
	b, _ := json.Marshal(appliance.Bootstrap{APIURL: e.url, APIKey: e.boot.APIKey, OrganizationID: e.boot.OrganizationID,
		Email: e.boot.Email, Password: e.boot.Password, CACert: e.caPath})
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}

	out, stderr := e.mustRun("", "whoami")
	if !strings.Contains(out, e.boot.OrganizationID) {
		t.Fatalf("whoami on the local appliance:\n%s", out)
	}
	if n := strings.Count(stderr, "Using the local appliance at "+e.url+" (credentials from "+path); n != 1 {
		t.Fatalf("the local appliance is said %d times on stderr, not once:\n%s", n, stderr)
	}
	out, _ = e.mustRun("", "status")
	for _, want := range []string{"API:      " + e.url, "From:     the local appliance (" + path + ")", "API key:  " + keyPrefix(e.boot.APIKey) + "…",
		"CA cert:  " + e.caPath, "Health:   "} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, e.boot.APIKey) || len(keyPrefix(e.boot.APIKey)) >= len(e.boot.APIKey)/2 {
		t.Errorf("status shows the secret:\n%s", out)
	}
	// An explicit --api wins, and is reported as such.
	if out, _ := e.mustRun("", "status", "--api", e.url, "--ca-cert", e.caPath); !strings.Contains(out, "From:     --api") || !strings.Contains(out, "(none: not logged in)") {
		t.Errorf("status with --api:\n%s", out)
	}

	login := "appliance login --api " + e.url + " --ca-cert " + e.caPath
	refuse := func(why string) {
		t.Helper()
		_, _, err := e.run("", "whoami")
		if err == nil || !strings.Contains(err.Error(), login) || !strings.Contains(err.Error(), why) {
			t.Fatalf("whoami with a bootstrap.json to refuse (%s): %v", why, err)
		}
		if _, _, err := e.run("", "status"); err == nil || !strings.Contains(err.Error(), login) {
			t.Fatalf("status with a bootstrap.json to refuse (%s): %v", why, err)
		}
	}
	// Writable by others: anyone could have put a URL (where the key goes) there.
	if err := os.Chmod(path, 0o666); err != nil {
		t.Fatal(err)
	}
	refuse("lets other users write it")
	if err := os.Chmod(path, 0o600); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		// Root reads anything: the check that is real for it is the owner. Another user's file is refused.
		if err := os.Chown(path, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		refuse("belongs to uid 65534")
	} else {
		if err := os.Chmod(path, 0); err != nil {
			t.Fatal(err)
		}
		refuse("permission denied")
	}
}
