package cmd

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestUpConfigFile: up's --config file gives values under the flags' names; the environment overrides it
// and a flag overrides both (config print says which applied and why); an unknown key or a value of the
// wrong type is refused with the file's line.
func TestUpConfigFile(t *testing.T) {
	for _, kv := range os.Environ() {
		if name, _, _ := strings.Cut(kv, "="); strings.HasPrefix(name, "APPLIANCE_") {
			t.Setenv(name, "")
			os.Unsetenv(name)
		}
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "appliance.toml")
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	print := func(args ...string) (string, error) {
		t.Helper()
		c := newConfigCmd()
		var out bytes.Buffer
		c.SetOut(&out)
		c.SetErr(&out)
		c.SetArgs(append([]string{"print"}, args...))
		err := c.Execute()
		return out.String(), err
	}
	write("# the appliance\nregion = \"from-file\"\nspare-clusters = 4\nrate-limit-loopback = true\nlisten = \"127.0.0.1:9443\"\nverify-backups-every = \"12h\"\n")
	t.Setenv("APPLIANCE_REGION", "from-env")
	out, err := print("--config", path, "--listen", "127.0.0.1:1234")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`region = "from-env"`, "# environment APPLIANCE_REGION",
		"spare-clusters = 4", "# file " + path,
		"rate-limit-loopback = true",
		`listen = "127.0.0.1:1234"`, "# flag --listen",
		`verify-backups-every = "12h0m0s"`,
		`log-level = "info"`, "# default",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("config print lacks %q:\n%s", want, out)
		}
	}
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "spare-clusters") && !strings.Contains(l, "# file ") ||
			strings.HasPrefix(l, "region") && !strings.Contains(l, "# environment") ||
			strings.HasPrefix(l, "listen ") && !strings.Contains(l, "# flag") {
			t.Errorf("wrong source: %s", l)
		}
	}

	write("listen = \"127.0.0.1:9443\"\n\nlisen = \"x\"\n")
	if _, err := print("--config", path); err == nil || !strings.Contains(err.Error(), path+`:3: unknown key "lisen"`) {
		t.Errorf("unknown key: %v", err)
	}
	write("region = \"a\"\nspare-clusters = \"two\"\n")
	if _, err := print("--config", path); err == nil || !strings.Contains(err.Error(), path+":2: spare-clusters") {
		t.Errorf("a string for a number: %v", err)
	}
	write("log-level = \"info\"\nkv-auth-timeout = \"soon\"\n")
	if _, err := print("--config", path); err == nil || !strings.Contains(err.Error(), path+":2: kv-auth-timeout") {
		t.Errorf("a bad duration: %v", err)
	}
	write("region = [\n")
	if _, err := print("--config", path); err == nil || !strings.Contains(err.Error(), "line") {
		t.Errorf("a syntax error: %v", err)
	}
}
