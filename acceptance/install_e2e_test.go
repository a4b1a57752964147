package acceptance

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestInstallService: `appliance install` writes a unit that systemd-analyze verify accepts (ExecStart the
// binary's absolute path running up --config, confined to the data directory and the embedded cache), the
// config file from the flags given (which config print reads back), and runs systemctl daemon-reload and
// enable --now (here /bin/echo, which shows the arguments); a second install keeps the config file and
// refuses flags that would not apply; uninstall disables the service and removes the unit, keeping the data
// and the config; a user who is not root is told to use sudo.
func TestInstallService(t *testing.T) {
	bin := e2eBuild(t)
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Fatalf("systemd-analyze is missing (apt-get install -y systemd): %v", err)
	}
	dir := t.TempDir()
	unitDir, configPath := filepath.Join(dir, "units"), filepath.Join(dir, "etc", "appliance.toml")
	dataDir, cache := filepath.Join(dir, "data"), filepath.Join(dir, "cache")
	run := func(wantOK bool, args ...string) string {
		t.Helper()
		cmd := exec.Command(bin, args...)
		cmd.Env = append(os.Environ(), "APPLIANCE_REGION=from-env")
		out, err := cmd.CombinedOutput()
		if (err == nil) != wantOK {
			t.Fatalf("appliance %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	svc := []string{"--unit-dir", unitDir, "--config-path", configPath, "--systemctl", "/bin/echo"}
	out := run(true, append([]string{"install", "--no-prepare", "--data-dir", dataDir, "--pg-embedded-cache", cache, "--listen", "0.0.0.0:7443"}, svc...)...)
	for _, want := range []string{"\ndaemon-reload\n", "\nenable --now appliance\n", "wrote the config file " + configPath, "is enabled and started"} {
		if !strings.Contains(out, want) {
			t.Errorf("install's output lacks %q:\n%s", want, out)
		}
	}
	unitPath := filepath.Join(unitDir, "appliance.service")
	unit, err := os.ReadFile(unitPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"ExecStart=" + bin + " up --config " + configPath + "\n", "User=root\n", "NoNewPrivileges=yes\n",
		"ProtectSystem=strict\n", "ReadWritePaths=" + dataDir + " " + cache + "\n", "PrivateTmp=yes\n",
		"Restart=on-failure\n", "LimitNOFILE=65536\n", "Delegate=yes\n", "After=network-online.target\n", "WantedBy=multi-user.target\n",
	} {
		if !bytes.Contains(unit, []byte(want)) {
			t.Errorf("the unit lacks %q:\n%s", want, unit)
		}
	}
	for _, p := range []string{dataDir, cache} {
		if fi, err := os.Stat(p); err != nil || !fi.IsDir() {
			t.Errorf("install did not make the writable path %s: %v", p, err)
		}
	}
	// systemd-analyze verify exits 0 on a mere warning (an unknown key, a bad value): any output fails.
	verify, err := exec.Command(analyze, "verify", unitPath).CombinedOutput()
	if err != nil || len(bytes.TrimSpace(verify)) > 0 {
		t.Errorf("systemd-analyze verify %s: %v\n%s\n%s", unitPath, err, verify, unit)
	}

	// The config file: the settings given (flags and environment), the defaults as comments; up reads it.
	conf, err := os.ReadFile(configPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`data-dir = "` + dataDir + `"`, `listen = "0.0.0.0:7443"`, `region = "from-env"`, `# log-level = "info"`} {
		if !bytes.Contains(conf, []byte(want+"\n")) {
			t.Errorf("the config file lacks %q:\n%s", want, conf)
		}
	}
	if fi, _ := os.Stat(configPath); fi.Mode().Perm() != 0o600 {
		t.Errorf("the config file's mode is %v, not 0600 (it may hold the metrics token)", fi.Mode().Perm())
	}
	printed := run(true, "config", "print", "--config", configPath)
	if !strings.Contains(printed, `listen = "0.0.0.0:7443"`) || !strings.Contains(printed, "# file "+configPath) {
		t.Errorf("config print does not read the written file back:\n%s", printed)
	}

	// Again: the file is kept; a flag that would not apply is refused.
	out = run(true, append([]string{"install", "--no-prepare", "--no-enable"}, svc...)...)
	if !strings.Contains(out, "kept the config file "+configPath) || !strings.Contains(out, "not enabled (--no-enable)") {
		t.Errorf("a second install: %s", out)
	}
	if after, _ := os.ReadFile(configPath); !bytes.Equal(after, conf) {
		t.Errorf("a second install changed the config file:\n%s", after)
	}
	if out := run(false, append([]string{"install", "--no-prepare", "--listen", "127.0.0.1:1"}, svc...)...); !strings.Contains(out, "--listen would not apply") {
		t.Errorf("install with a flag and an existing config file: %s", out)
	}
	if out := run(false, append([]string{"install", "--no-prepare", "--ephemeral"}, svc...)...); !strings.Contains(out, "a service is not ephemeral") {
		t.Errorf("install --ephemeral: %s", out)
	}

	out = run(true, append([]string{"uninstall"}, svc...)...)
	for _, want := range []string{"disable --now appliance\n", "removed the unit " + unitPath, "kept the data directory " + dataDir + " and the config file " + configPath} {
		if !strings.Contains(out, want) {
			t.Errorf("uninstall's output lacks %q:\n%s", want, out)
		}
	}
	if _, err := os.Stat(unitPath); !os.IsNotExist(err) {
		t.Errorf("uninstall left the unit: %v", err)
	}
	for _, p := range []string{dataDir, configPath} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("uninstall removed %s: %v", p, err)
		}
	}

	// Not root: a clear error, nothing written.
	if os.Geteuid() == 0 {
		for _, d := range []string{filepath.Dir(filepath.Dir(bin)), filepath.Dir(bin)} { // t.TempDir's are 0700
			if err := os.Chmod(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		cmd := exec.Command(bin, append([]string{"install", "--no-prepare"}, svc...)...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), "must run as root") || !strings.Contains(string(out), "sudo appliance install") {
			t.Errorf("install as nobody: %v\n%s", err, out)
		}
		if _, err := os.Stat(unitPath); !os.IsNotExist(err) {
			t.Errorf("install as nobody wrote the unit: %v", err)
		}
	}
}
