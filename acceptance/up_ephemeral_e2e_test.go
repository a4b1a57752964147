package acceptance

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/theappliance/appliance/appliance/appliancetest"
	"github.com/theappliance/appliance/appliance/apptest"
	"github.com/theappliance/appliance/appliance/daemon"
)

// TestUpEphemeralLeavesNothing: `up --ephemeral` prints its credentials as one JSON line (and writes the
// --env-file), serves a project whose server runs without durability, and after SIGTERM, and after
// SIGKILL, leaves nothing: no process, no listening port, no directory (after a SIGKILL its guard cleans
// up). A start also removes the directory of an earlier throwaway appliance whose owner is dead.
func TestUpEphemeralLeavesNothing(t *testing.T) {
	bin := e2eBuild(t)
	parent := appliancetest.TraversableTempDir(t)
	// What a SIGKILLed appliance whose guard died too would leave: its owner (pid 1's start time is not 1).
	orphan := filepath.Join(parent, "appliance-ephemeral-orphan")
	if err := os.MkdirAll(filepath.Join(orphan, "data"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(orphan, "owner"), []byte("1 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		t.Run(sig.String(), func(t *testing.T) {
			envFile := filepath.Join(t.TempDir(), "appliance.env")
			cmd := exec.Command(bin, "up", "--ephemeral", "--data-dir", parent, "--env-file", envFile, "--no-install", "--log-level", "warn")
			var stderr e2eBuffer
			cmd.Stderr = &stderr
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			exited := false
			t.Cleanup(func() {
				if !exited {
					cmd.Process.Kill()
					cmd.Wait()
				}
			})
			line, err := bufio.NewReader(stdout).ReadBytes('\n')
			if err != nil {
				t.Fatalf("no JSON line on stdout: %v\nstderr:\n%s", err, stderr.String())
			}
			var cr struct {
				APIURL        string `json:"api_url"`
				CACert        string `json:"ca_cert"`
				APIKey        string `json:"api_key"`
				OwnerEmail    string `json:"owner_email"`
				OwnerPassword string `json:"owner_password"`
				KVRESP        string `json:"kv_resp"`
				KVREST        string `json:"kv_rest"`
				PID           int    `json:"pid"`
				DataDir       string `json:"data_dir"`
			}
			if err := json.Unmarshal(line, &cr); err != nil {
				t.Fatalf("stdout's line %q: %v", line, err)
			}
			if cr.PID != cmd.Process.Pid || cr.APIKey == "" || cr.OwnerEmail == "" || cr.OwnerPassword == "" || cr.KVRESP == "" ||
				!strings.HasPrefix(cr.KVREST, "https://") || !strings.Contains(cr.CACert, "BEGIN CERTIFICATE") || !strings.HasPrefix(cr.DataDir, parent+"/appliance-ephemeral-") {
				t.Fatalf("credentials: %s", line)
			}
			if _, err := os.Stat(orphan); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the orphaned directory of a dead appliance is still there: %v", err)
			}
			env, err := os.ReadFile(envFile)
			if err != nil || !strings.Contains(string(env), `APPLIANCE_API_URL="`+cr.APIURL+`"`) || !strings.Contains(string(env), `APPLIANCE_API_KEY="`+cr.APIKey+`"`) {
				t.Fatalf("env file: %v\n%s", err, env)
			}
			cl, err := apptest.NewClient(cr.APIURL, []byte(cr.CACert), cr.APIKey)
			if err != nil {
				t.Fatal(err)
			}
			_, dsn, err := cl.CreateProject(t.Context(), "shop")
			if err != nil {
				t.Fatalf("%v\nstderr:\n%s", err, stderr.String())
			}
			conn, err := pgx.Connect(t.Context(), dsn)
			if err != nil {
				t.Fatal(err)
			}
			var fsync string
			err = conn.QueryRow(t.Context(), "SELECT current_setting('fsync')").Scan(&fsync)
			conn.Close(t.Context())
			if err != nil || fsync != "off" {
				t.Fatalf("fsync: %q, %v", fsync, err)
			}
			pgURL, _ := url.Parse(dsn)
			dir := filepath.Dir(cr.DataDir)
			if len(daemon.ProcessesUnder(dir)) == 0 {
				t.Fatalf("no process of %s while it runs", dir)
			}
			addrs := []string{strings.TrimPrefix(cr.APIURL, "https://"), cr.KVRESP, strings.TrimPrefix(cr.KVREST, "https://"), pgURL.Host}

			if err := cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			err = cmd.Wait()
			exited = true
			if sig == syscall.SIGTERM && err != nil {
				t.Fatalf("exit after SIGTERM: %v\nstderr:\n%s", err, stderr.String())
			}
			// After a SIGKILL the guard cleans up on its own: wait for it (bounded).
			for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
				left := leftovers(dir, addrs, filepath.Dir(bin))
				if left == "" {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("after %s: %s\nstderr:\n%s", sig, left, stderr.String())
				}
			}
			if _, err := os.Stat(envFile); sig == syscall.SIGTERM && !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the env file is left after SIGTERM: %v", err)
			}
		})
	}
}

// TestUpEphemeralExitWithParent: `up --ephemeral --exit-with-parent` stops, leaving nothing, when the
// process that started it is SIGKILLed.
func TestUpEphemeralExitWithParent(t *testing.T) {
	bin := e2eBuild(t)
	parent := appliancetest.TraversableTempDir(t)
	outFile := filepath.Join(t.TempDir(), "out.json")
	sh := exec.Command("sh", "-c", `"$0" up --ephemeral --exit-with-parent --no-install --log-level warn --data-dir "$1" >"$2" & wait`, bin, parent, outFile)
	if err := sh.Start(); err != nil {
		t.Fatal(err)
	}
	var cr struct {
		APIURL  string `json:"api_url"`
		PID     int    `json:"pid"`
		DataDir string `json:"data_dir"`
	}
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(50 * time.Millisecond) {
		if b, err := os.ReadFile(outFile); err == nil && bytes.HasSuffix(b, []byte("\n")) {
			if err := json.Unmarshal(b, &cr); err != nil {
				t.Fatalf("%q: %v", b, err)
			}
			break
		}
		if time.Now().After(deadline) {
			sh.Process.Kill()
			t.Fatal("no JSON line")
		}
	}
	sh.Process.Kill() // SIGKILL: the appliance is orphaned
	sh.Wait()
	dir := filepath.Dir(cr.DataDir)
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		left := leftovers(dir, []string{strings.TrimPrefix(cr.APIURL, "https://")}, filepath.Dir(bin))
		if syscall.Kill(cr.PID, 0) == nil {
			left += "the appliance (pid " + strconv.Itoa(cr.PID) + ") runs; "
		}
		if left == "" {
			break
		}
		if time.Now().After(deadline) {
			syscall.Kill(cr.PID, syscall.SIGKILL)
			t.Fatalf("after its parent's SIGKILL: %s", left)
		}
	}
}

// leftovers says what is left of a throwaway appliance ("": nothing): its directory, a process of it
// (the guard runs the binary in binDir), a port still listening.
func leftovers(dir string, addrs []string, binDir string) string {
	var b bytes.Buffer
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		b.WriteString("directory " + dir + " is there; ")
	}
	for pid, cmd := range daemon.ProcessesUnder(dir) {
		b.WriteString("process " + cmd + " (pid " + strconv.Itoa(pid) + "); ")
	}
	for pid, cmd := range daemon.ProcessesUnder(binDir) {
		b.WriteString("process " + cmd + " (pid " + strconv.Itoa(pid) + "); ")
	}
	for _, a := range addrs {
		if c, err := net.DialTimeout("tcp", a, time.Second); err == nil {
			c.Close()
			b.WriteString(a + " listens; ")
		}
	}
	return b.String()
}
