package acceptance

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/theappliance/appliance/appliance/appliancetest"
)

// e2eRunFails runs the binary (up or doctor) on dataDir to its end, which must be an error exit, and
// returns its output. A run that does not end within e2eDeadline (an up that started) fails the test.
func e2eRunFails(t *testing.T, bin, dataDir string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), e2eDeadline)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append(args, "--data-dir", dataDir, "--listen", "127.0.0.1:0", "--pg-ports", e2ePorts(t, dataDir))...)
	cmd.Env = append(os.Environ(), "APPLIANCE_KV_LISTEN=127.0.0.1:0", "APPLIANCE_KV_REST_LISTEN=127.0.0.1:0")
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("%s ran until killed after %v instead of refusing:\n%s", args[0], e2eDeadline, out)
	}
	if err == nil {
		t.Fatalf("%s succeeded:\n%s", args[0], out)
	}
	return string(out)
}

func e2eWants(t *testing.T, what, got string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(got, w) {
			t.Errorf("%s lacks %q:\n%s", what, w, got)
		}
	}
}

// e2eProvision creates a development project and waits for it to be active.
func (p *e2eProc) e2eProvision(t testing.TB, key, name string) string {
	t.Helper()
	var created struct {
		Job     *e2eJob     `json:"job"`
		Project *e2eProject `json:"project"`
	}
	p.do(t, key, http.MethodPost, "/v1/projects", map[string]any{"name": name, "environment": "development"}, http.StatusAccepted, &created)
	if j := p.waitJob(t, key, created.Job.ID); j.State != "completed" {
		t.Fatalf("provision %s: %s %s", name, j.State, j.Error)
	}
	return created.Project.ID
}

// TestUpRefusesDataWithoutMetadata: after a run that left a project's instance, backups' place, the CA and
// bootstrap.json, a missing or empty meta.db stops up with an error naming what it found and how to
// recover, and doctor fails the same way; up neither bootstraps anew nor touches bootstrap.json. Before,
// up took it for a first start: a new organization and admin key, bootstrap.json overwritten, the project
// gone from the API. Putting the copy of meta.db back starts as before.
func TestUpRefusesDataWithoutMetadata(t *testing.T) {
	t.Parallel()
	bin := e2eBuild(t)
	dataDir := appliancetest.TraversableTempDir(t)
	t.Cleanup(func() { e2eKillUnder(t, dataDir) })
	a := e2eStart(t, bin, dataDir)
	key := e2eAdminKey(t, dataDir)
	prjID := a.e2eProvision(t, key, "kept")
	a.stop(t, syscall.SIGTERM)
	bootstrapPath, metaPath := filepath.Join(dataDir, "bootstrap.json"), filepath.Join(dataDir, "meta.db")
	bootstrap, err := os.ReadFile(bootstrapPath)
	if err != nil {
		t.Fatal(err)
	}
	saved, err := os.ReadFile(metaPath)
	if err != nil {
		t.Fatal(err)
	}

	for _, c := range []struct {
		name, state string
		prepare     func()
	}{
		{"missing", "is missing", func() { os.Remove(metaPath) }},
		{"empty", "is empty", func() { os.WriteFile(metaPath, nil, 0o600) }},
		{"missing with its generation", "is missing", func() { os.Remove(metaPath); os.Remove(metaPath + ".generation") }},
	} {
		c.prepare()
		out := e2eRunFails(t, bin, dataDir, "up")
		e2eWants(t, c.name+": up", out, "refusing to start", metaPath+" "+c.state, "instance directories in instances/",
			"the first start's credentials (bootstrap.json)", "a certificate authority (ca/)",
			"Restore meta.db from a copy", "move the data directory away")
		if strings.Contains(out, "First start") {
			t.Errorf("%s: up bootstrapped anew:\n%s", c.name, out)
		}
		out = e2eRunFails(t, bin, dataDir, "doctor")
		e2eWants(t, c.name+": doctor", out, "FAIL  metadata", metaPath+" "+c.state, "fix: restore meta.db from a copy")
		if got, _ := os.ReadFile(bootstrapPath); !bytes.Equal(got, bootstrap) {
			t.Fatalf("%s: bootstrap.json changed:\n%s", c.name, got)
		}
		if st, err := os.Stat(metaPath); c.state == "is missing" && err == nil || c.state == "is empty" && (err != nil || st.Size() != 0) {
			t.Fatalf("%s: up made or changed meta.db (%v)", c.name, err)
		}
	}

	// The copy put back: the same organization, key and project.
	if err := os.WriteFile(metaPath, saved, 0o600); err != nil {
		t.Fatal(err)
	}
	b := e2eStart(t, bin, dataDir)
	e2eNoRebootstrap(t, b, bootstrapPath, bootstrap)
	if prj := b.project(t, key, prjID); prj.State != "active" {
		t.Fatalf("the project after meta.db came back: %+v", prj)
	}
	b.stop(t, syscall.SIGTERM)
}

// TestUpOlderMetadata: an older copy of meta.db put back (taken before a KV token rotation, an API key's
// revocation, a project's deletion and another's creation) is refused, naming the flag; doctor fails the
// same way. With --accept-older-metadata up starts, but the rotated token and the revoked key stay dead,
// and /status, the deleted project's alerts and doctor name every mismatch with the data directory.
// Before, the older file was taken silently: the old token and key worked again, the deleted project
// came back active (and down) and the new one's instance was left on disk unreported.
func TestUpOlderMetadata(t *testing.T) {
	t.Parallel()
	bin := e2eBuild(t)
	dataDir := appliancetest.TraversableTempDir(t)
	t.Cleanup(func() { e2eKillUnder(t, dataDir) })
	metaPath := filepath.Join(dataDir, "meta.db")

	a := e2eStart(t, bin, dataDir)
	key := e2eAdminKey(t, dataDir)
	var boot struct {
		OrganizationID string `json:"organization_id"`
	}
	raw, _ := os.ReadFile(filepath.Join(dataDir, "bootstrap.json"))
	json.Unmarshal(raw, &boot)
	kept := a.e2eProvision(t, key, "kept")
	gone := a.e2eProvision(t, key, "gone")
	var kvCreated struct {
		Job     *e2eJob `json:"job"`
		KVStore struct {
			Token string `json:"token"`
		} `json:"kv_store"`
	}
	a.do(t, key, http.MethodPost, "/v1/projects/"+kept+"/kv", nil, http.StatusAccepted, &kvCreated)
	if j := a.waitJob(t, key, kvCreated.Job.ID); j.State != "completed" {
		t.Fatalf("kv.create %s: %s", j.State, j.Error)
	}
	oldToken := kvCreated.KVStore.Token
	a.kvWrite(t, key, kept, oldToken, "k", 3)
	var minted struct {
		APIKey struct {
			ID string `json:"id"`
		} `json:"api_key"`
		Plain string `json:"plaintext_api_key"`
	}
	a.do(t, key, http.MethodPost, "/v1/organizations/"+boot.OrganizationID+"/api-keys",
		map[string]any{"name": "to revoke", "scopes": []string{"projects:read"}}, http.StatusCreated, &minted)
	a.stop(t, syscall.SIGTERM)
	older, err := os.ReadFile(metaPath)
	if err != nil {
		t.Fatal(err)
	}

	b := e2eStart(t, bin, dataDir)
	b.kvCheck(t, key, kept, oldToken, "k", 3) // the store's server is up again
	var rotated struct {
		KVStore struct {
			Token string `json:"token"`
		} `json:"kv_store"`
	}
	b.do(t, key, http.MethodPost, "/v1/projects/"+kept+"/kv/rotate-token", nil, http.StatusOK, &rotated)
	if rotated.KVStore.Token == "" || rotated.KVStore.Token == oldToken {
		t.Fatalf("rotate-token gave %q", rotated.KVStore.Token)
	}
	b.do(t, key, http.MethodDelete, "/v1/organizations/"+boot.OrganizationID+"/api-keys/"+minted.APIKey.ID, nil, http.StatusOK, nil)
	var deleted struct {
		Job *e2eJob `json:"job"`
	}
	b.do(t, key, http.MethodDelete, "/v1/projects/"+gone, nil, http.StatusAccepted, &deleted)
	if j := b.waitJob(t, key, deleted.Job.ID); j.State != "completed" {
		t.Fatalf("project.delete: %s %s", j.State, j.Error)
	}
	newer := b.e2eProvision(t, key, "newer")
	newerInst := b.project(t, key, newer).PrimaryInstanceID
	b.stop(t, syscall.SIGTERM)

	if err := os.WriteFile(metaPath, older, 0o600); err != nil {
		t.Fatal(err)
	}
	out := e2eRunFails(t, bin, dataDir, "up")
	e2eWants(t, "up on the older file", out, "metadata is older than the data directory", "--accept-older-metadata")
	out = e2eRunFails(t, bin, dataDir, "doctor")
	e2eWants(t, "doctor on the older file", out, "FAIL  metadata", "--accept-older-metadata")

	c := e2eStartWith(t, bin, dataDir, nil, []string{"--accept-older-metadata"})
	// The key revoked after the copy was taken stays revoked.
	c.do(t, minted.Plain, http.MethodGet, "/v1/me", nil, http.StatusUnauthorized, nil)
	// The token rotated away opens nothing (once the store's server runs); a new rotation opens the
	// store, its data intact.
	e2eEventually(t, e2eDeadline, "the key-value store's server to run", func() (bool, string) {
		comp := c.component(t, "kv-stores")
		return strings.HasPrefix(comp, "operational: 1 stores running"), comp
	})
	if err := c.kvClient(t, key, kept, oldToken).Ping(t.Context()).Err(); err == nil || !strings.Contains(err.Error(), "WRONGPASS") {
		t.Fatalf("the KV token rotated away: %v", err)
	}
	var again struct {
		KVStore struct {
			Token string `json:"token"`
		} `json:"kv_store"`
	}
	c.do(t, key, http.MethodPost, "/v1/projects/"+kept+"/kv/rotate-token", nil, http.StatusOK, &again)
	c.kvCheck(t, key, kept, again.KVStore.Token, "k", 3)
	if err := c.kvClient(t, key, kept, oldToken).Ping(t.Context()).Err(); err == nil || !strings.Contains(err.Error(), "WRONGPASS") {
		t.Fatalf("the KV token rotated away, after a new rotation: %v", err)
	}

	goneInst := c.project(t, key, gone).PrimaryInstanceID
	meta := c.component(t, "metadata")
	e2eWants(t, "/status's metadata component", meta, "degraded: ", "instance "+goneInst+" (project "+gone+", running) has no data",
		"backups/"+newer+" holds backups of a project the metadata does not know",
		"API key "+minted.APIKey.ID+" was live in the metadata but revoked before", "had a token rotated before")
	// The newer project's instance: a new one, or a spare the older metadata has as a spare still (and
	// must never hand out again).
	newerMismatch := []string{"instances/" + newerInst + " is not an instance the metadata knows",
		"instance " + newerInst + " is spare of project none in the metadata, but its directory belongs to project " + newer}
	if !strings.Contains(meta, newerMismatch[0]) && !strings.Contains(meta, newerMismatch[1]) {
		t.Errorf("/status's metadata component names no mismatch of the newer project's instance %s:\n%s", newerInst, meta)
	}
	var status struct {
		Status string `json:"status"`
	}
	c.do(t, "", http.MethodGet, "/status", nil, http.StatusOK, &status)
	if status.Status == "operational" {
		t.Errorf("/status says operational beside: %s", meta)
	}
	var alerts struct {
		Alerts []struct{ Kind, Severity, Message string } `json:"alerts"`
	}
	c.do(t, key, http.MethodGet, "/v1/projects/"+gone+"/alerts", nil, http.StatusOK, &alerts)
	if len(alerts.Alerts) != 1 || alerts.Alerts[0].Kind != "data_missing" || alerts.Alerts[0].Severity != "critical" ||
		!strings.Contains(alerts.Alerts[0].Message, goneInst) {
		t.Errorf("the deleted project's alerts: %+v", alerts.Alerts)
	}
	c.stop(t, syscall.SIGTERM)

	// Doctor, on the stopped appliance: the file opens; what differs from the disk is a warning.
	cmd := exec.Command(bin, "doctor", "--data-dir", dataDir, "--listen", "127.0.0.1:0", "--pg-ports", e2ePorts(t, dataDir),
		"--kv-listen", "127.0.0.1:0", "--kv-rest-listen", "127.0.0.1:0")
	doctor, _ := cmd.CombinedOutput()
	e2eWants(t, "doctor after the older file was accepted", string(doctor), "warn  metadata", "does not match the data directory",
		"instance "+goneInst+" (project "+gone+", running) has no data", "backups/"+newer+" holds backups")
	if !strings.Contains(string(doctor), newerMismatch[0]) && !strings.Contains(string(doctor), newerMismatch[1]) {
		t.Errorf("doctor names no mismatch of the newer project's instance %s:\n%s", newerInst, doctor)
	}
	// The accepted file is the data directory's from now on: a plain start takes it.
	d := e2eStart(t, bin, dataDir)
	d.stop(t, syscall.SIGTERM)
}

// component is "status: message" of a component of /status ("" when it has none of that name).
func (p *e2eProc) component(t *testing.T, name string) string {
	t.Helper()
	var status struct {
		Components []struct{ Name, Status, Message string } `json:"components"`
	}
	p.do(t, e2eMetricsToken, http.MethodGet, "/status", nil, http.StatusOK, &status) // the details are an operator's
	for _, c := range status.Components {
		if c.Name == name {
			return c.Status + ": " + c.Message
		}
	}
	return ""
}
