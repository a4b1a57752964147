package integrations

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestOperatorSettings: up --integrations-base-url and --integrations-oauth-file are read, and bad
// values are refused naming what is wrong.
func TestOperatorSettings(t *testing.T) {
	urls, err := ParseBaseURLs("deploy_a=https://vercel.example.com/, auth_a=http://127.0.0.1:9000")
	if err != nil || urls["deploy_a"] != "https://vercel.example.com" || urls["auth_a"] != "http://127.0.0.1:9000" {
		t.Fatalf("%v %v", urls, err)
	}
	for in, want := range map[string]string{"deploy_z=https://x": "provider", "deploy_a=ftp://x": "not an http", "deploy_a=https://a,deploy_a=https://b": "twice",
		"deploy_a": "provider=URL", "deploy_a=https://u:p@x": "not an http"} {
		if _, err := ParseBaseURLs(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v", in, err)
		}
	}
	dir := t.TempDir()
	write := func(s string) string {
		p := filepath.Join(dir, "oauth.json")
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	apps, err := ReadOAuthApps(write(`{"deploy_a": {"client_id": "oac_1", "client_secret": "s", "slug": "appliance"}}`))
	if err != nil || apps["deploy_a"].Slug != "appliance" {
		t.Fatalf("%v %v", apps, err)
	}
	for in, want := range map[string]string{`{"deploy_a": {"client_id": "x"}}`: "client_secret", `{"auth_a": {"client_id": "x", "client_secret": "y"}}`: "auth_url",
		`{"deploy_a": {"client_id": "x", "client_secret": "y"}}`: "slug", `{"nope": {}}`: "not a provider", `{"deploy_a": {"client": 1}}`: "unknown field"} {
		if _, err := ReadOAuthApps(write(in)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v", in, err)
		}
	}
}
