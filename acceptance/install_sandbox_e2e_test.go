package acceptance

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/theappliance/appliance/appliance/appliancetest"
	"github.com/theappliance/appliance/appliance/apptest"
)

// sandboxEnv, in the environment of this test binary, makes it the sandbox of TestServiceSandbox (init
// below): in the mount namespace of its own that the test gave it, every path of the variable (separated
// by ':') stays writable, the rest of the file system becomes read-only — what ProtectSystem=strict and
// ReadWritePaths= do — and it execs the program and arguments of sandboxExecEnv (a JSON list).
const (
	sandboxEnv     = "APPLIANCE_TEST_SANDBOX_WRITABLE"
	sandboxExecEnv = "APPLIANCE_TEST_SANDBOX_EXEC"
)

func init() {
	writable := os.Getenv(sandboxEnv)
	if writable == "" {
		return
	}
	var argv []string
	err := json.Unmarshal([]byte(os.Getenv(sandboxExecEnv)), &argv)
	if err == nil {
		err = syscall.Mount("", "/", "", syscall.MS_REC|syscall.MS_PRIVATE, "")
	}
	for _, p := range strings.Split(writable, ":") {
		if err == nil {
			err = syscall.Mount(p, p, "", syscall.MS_BIND|syscall.MS_REC, "")
		}
	}
	if err == nil { // the root read-only; the writable paths are mounts of their own and stay as they were
		err = syscall.Mount("", "/", "", syscall.MS_REMOUNT|syscall.MS_BIND|syscall.MS_RDONLY, "")
	}
	if err == nil {
		err = syscall.Exec(argv[0], argv, append(os.Environ()[:0:0], "PATH="+os.Getenv("PATH"), "HOME="+os.Getenv("HOME")))
	}
	fmt.Fprintf(os.Stderr, "sandbox: %v\n", err)
	os.Exit(97)
}

// TestServiceSandbox: up, run as the installed unit runs it — `up --config FILE` with the file install
// wrote — on a file system read-only but for the unit's ReadWritePaths= (read from the unit install wrote,
// which node.ServicePaths derives from the settings), starts, provisions a project and answers its
// SELECT 1: nothing it writes is outside those paths. (/tmp is read-only here too, stricter than the unit's
// PrivateTmp=.)
func TestServiceSandbox(t *testing.T) {
	bin := e2eBuild(t)
	root := appliancetest.TraversableTempDir(t)
	dataDir, cache := filepath.Join(root, "data"), filepath.Join(root, "cache")
	unitDir, configPath := filepath.Join(root, "units"), filepath.Join(root, "appliance.toml")
	ports := appliancetest.FreePorts(t, 20)
	install := exec.Command(bin, "install", "--no-prepare", "--no-enable", "--unit-dir", unitDir, "--config-path", configPath,
		"--data-dir", dataDir, "--pg-embedded-cache", cache, "--listen", "127.0.0.1:0", "--kv-listen", "127.0.0.1:0",
		"--kv-rest-listen", "127.0.0.1:0", "--pg-ports", fmt.Sprintf("%d-%d", ports.First, ports.Last), "--spare-clusters", "0",
		"--no-install", "--disk-reserve-mb", "0", "--log-level", "warn", "--cgroups", "off")
	if out, err := install.CombinedOutput(); err != nil {
		t.Fatalf("install: %v\n%s", err, out)
	}
	unit, err := os.ReadFile(filepath.Join(unitDir, "appliance.service"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^ReadWritePaths=(.*)$`).FindSubmatch(unit)
	exec1 := regexp.MustCompile(`(?m)^ExecStart=(.*)$`).FindSubmatch(unit)
	if m == nil || exec1 == nil {
		t.Fatalf("the unit has no ReadWritePaths= or ExecStart=:\n%s", unit)
	}
	writable := strings.Fields(string(m[1]))
	argv, _ := json.Marshal(strings.Fields(string(exec1[1])))
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), sandboxEnv+"="+strings.Join(writable, ":"), sandboxExecEnv+"="+string(argv))
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
	var stderr e2eBuffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("a process in a mount namespace of its own (CLONE_NEWNS, as root): %v", err)
	}
	exited := false
	t.Cleanup(func() {
		if !exited {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	sc := bufio.NewScanner(stdout)
	for sc.Scan() && !strings.HasPrefix(sc.Text(), "Press Ctrl-C") {
	}
	if sc.Err() != nil || !strings.HasPrefix(sc.Text(), "Press Ctrl-C") {
		t.Fatalf("up in the sandbox did not start: %v\nstderr:\n%s", sc.Err(), stderr.String())
	}
	go func() {
		for sc.Scan() {
		}
	}()
	var boot struct {
		APIURL string `json:"api_url"`
		APIKey string `json:"api_key"`
		CACert string `json:"ca_cert"`
	}
	b, err := os.ReadFile(filepath.Join(dataDir, "bootstrap.json"))
	if err == nil {
		err = json.Unmarshal(b, &boot)
	}
	if err != nil {
		t.Fatal(err)
	}
	ca, err := os.ReadFile(boot.CACert)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := apptest.NewClient(boot.APIURL, ca, boot.APIKey)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	_, dsn, err := cl.CreateProject(ctx, "sandboxed")
	if err != nil {
		t.Fatalf("a project in the sandbox: %v\nstderr:\n%s", err, stderr.String())
	}
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	var one int
	if err := conn.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil || one != 1 {
		t.Fatalf("SELECT 1: %v", err)
	}
	conn.Close(ctx)
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	exited = true
	if err != nil {
		t.Errorf("up in the sandbox: %v\nstderr:\n%s", err, stderr.String())
	}
	if strings.Contains(stderr.String(), "read-only file system") {
		t.Errorf("up wrote outside the unit's ReadWritePaths=:\n%s", stderr.String())
	}
}
