package postgres

import (
	"context"
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestInitFromTemplate: with TemplateDir, the first Init makes the initdb template and every Init copies
// it; each copy is a cluster of its own as initdb makes one: its own system identifier (not the template's
// nor its sibling's; the server starts on its WAL and writes more), the admin password given, data
// checksums, and a durable copy as well as one without durability. A template another user could write is
// refused.
func TestInitFromTemplate(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	templates := filepath.Join(b.root, "templates")
	start := func(name string, noSync bool) *Instance {
		t.Helper()
		inst := &Instance{ID: name, Dir: filepath.Join(b.root, name), ListenHost: "127.0.0.1", Bin: b.bin, User: b.user,
			Port: freePort(t), NoSync: noSync, TemplateDir: templates}
		certPEM, keyPEM, caPEM, err := b.ca.InstanceTLS("127.0.0.1", "localhost")
		if err != nil {
			t.Fatal(err)
		}
		t0 := time.Now()
		if err := inst.Init(ctx, nil, InitOptions{AdminPassword: adminPassword, CertPEM: certPEM, KeyPEM: keyPEM, CAPEM: caPEM}); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: Init %v", name, time.Since(t0).Round(time.Millisecond))
		t.Cleanup(func() {
			if err := inst.Remove(context.Background()); err != nil {
				t.Error(err)
			}
		})
		if err := inst.Start(ctx, nil); err != nil {
			t.Fatal(err)
		}
		return inst
	}
	sysid := func(inst *Instance) uint64 {
		t.Helper()
		conn := admin(t, inst)
		var id int64
		if err := conn.QueryRow(ctx, "SELECT system_identifier FROM pg_control_system()").Scan(&id); err != nil {
			t.Fatal(err)
		}
		if got := show(t, conn, "data_checksums"); got != "on" {
			t.Errorf("%s: data_checksums %s", inst.ID, got)
		}
		// More WAL after the copy's: a new segment, a checkpoint, a table.
		exec1(t, conn, "CREATE TABLE IF NOT EXISTS public.t AS SELECT g FROM generate_series(1, 1000) g")
		exec1(t, conn, "SELECT pg_switch_wal()")
		exec1(t, conn, "CHECKPOINT")
		return uint64(id)
	}
	a := start("a", false)
	keeping.Wait() // the template a's Init made is kept in the background
	b2 := start("b", true)
	keys, err := os.ReadDir(templates)
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 1 || strings.HasPrefix(keys[0].Name(), ".") {
		t.Fatalf("templates: %v, want one", keys)
	}
	ctl, err := os.ReadFile(filepath.Join(templates, keys[0].Name(), "pgdata", pgControlFile))
	if err != nil {
		t.Fatal(err)
	}
	tpl := binary.LittleEndian.Uint64(ctl)
	idA, idB := sysid(a), sysid(b2)
	if idA == tpl || idB == tpl || idA == idB {
		t.Errorf("system identifiers: template %d, a %d, b %d: want three different ones", tpl, idA, idB)
	}
	// A restart reads the copy's pg_control and WAL again.
	if err := a.Restart(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if got := sysid(a); got != idA {
		t.Errorf("a's system identifier after a restart: %d, was %d", got, idA)
	}

	// A template directory others may write is refused.
	if err := os.Chmod(templates, 0o777); err != nil {
		t.Fatal(err)
	}
	bad := &Instance{ID: "c", Dir: filepath.Join(b.root, "c"), ListenHost: "127.0.0.1", Bin: b.bin, User: b.user, Port: freePort(t), TemplateDir: templates}
	certPEM, keyPEM, caPEM, _ := b.ca.InstanceTLS("127.0.0.1")
	if err := bad.Init(ctx, nil, InitOptions{AdminPassword: adminPassword, CertPEM: certPEM, KeyPEM: keyPEM, CAPEM: caPEM}); err == nil || !strings.Contains(err.Error(), "may be written by others") {
		t.Errorf("Init with a world-writable template directory: %v", err)
	}
}
