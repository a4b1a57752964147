package nodeloss

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/theappliance/appliance/appliance/postgres"
	"github.com/theappliance/appliance/store"
)

// instanceDir makes an instance directory under dir with pg_hba.conf hba (no server runs).
func instanceDir(t *testing.T, dir, id string, hba []byte) string {
	t.Helper()
	d := filepath.Join(dir, id)
	if err := os.MkdirAll(filepath.Join(d, "pgdata"), 0o700); err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{"PG_VERSION": []byte("15\n"), "pg_hba.conf": hba} {
		if err := os.WriteFile(filepath.Join(d, "pgdata", name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return d
}

func hbaOf(t *testing.T, d string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(d, "pgdata", "pg_hba.conf"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestWatchdogFencesAtTheDeadline: the watchdog fences every instance when the time it was told passes
// with no newer line (an instance fenced before by an upgrade stays fenced after the unfence), not a
// directory kept aside; "stop" ends it; Unfence restores each pg_hba.conf as it was.
func TestWatchdogFencesAtTheDeadline(t *testing.T) {
	dir := t.TempDir()
	open := instanceDir(t, dir, "ins_open", postgres.HBA(false))
	upgrading := instanceDir(t, dir, "ins_upgrading", postgres.HBA(true))
	aside := instanceDir(t, dir, "ins_old.fenced-20260101T000000Z", postgres.HBA(false))
	r, w := io.Pipe()
	done := make(chan error, 1)
	go func() { done <- RunWatchdog(t.Context(), r, dir, slog.New(slog.DiscardHandler)) }()
	if _, err := io.WriteString(w, "60000\n"); err != nil { // far ahead: nothing is fenced
		t.Fatal(err)
	}
	if _, err := io.WriteString(w, "50\n"); err != nil { // a renewal told later wins
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for !SelfFenced(open) || !SelfFenced(upgrading) {
		if time.Now().After(deadline) {
			t.Fatal("the watchdog fenced nothing after the deadline passed")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := io.WriteString(w, "stop\n"); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{open, upgrading} {
		if hbaOf(t, d) != string(postgres.HBA(true)) {
			t.Fatalf("%s: pg_hba.conf not fenced", d)
		}
	}
	if SelfFenced(aside) || hbaOf(t, aside) != string(postgres.HBA(false)) {
		t.Fatal("a directory kept aside was fenced")
	}
	for d, want := range map[string][]byte{open: postgres.HBA(false), upgrading: postgres.HBA(true)} {
		if ok, err := Unfence(d); err != nil || !ok {
			t.Fatalf("unfence %s: %v %v", d, ok, err)
		}
		if hbaOf(t, d) != string(want) || SelfFenced(d) {
			t.Fatalf("%s after the unfence: marker %v, pg_hba.conf %q", d, SelfFenced(d), hbaOf(t, d))
		}
	}
	if ok, err := Unfence(open); err != nil || ok {
		t.Fatalf("unfence of an instance not fenced: %v %v", ok, err)
	}
}

// TestWatchdogFencesWhenUpDies: up's pipe closed without "stop" (up killed): the watchdog fences at the
// deadline it was told last, then returns; told "0" it fences at once.
func TestWatchdogFencesWhenUpDies(t *testing.T) {
	dir := t.TempDir()
	d := instanceDir(t, dir, "ins_1", postgres.HBA(false))
	r, w := io.Pipe()
	done := make(chan error, 1)
	go func() { done <- RunWatchdog(context.Background(), r, dir, slog.New(slog.DiscardHandler)) }()
	io.WriteString(w, "100\n")
	w.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !SelfFenced(d) {
		t.Fatal("the watchdog returned without fencing after up's pipe closed")
	}
	Unfence(d)
	r, w = io.Pipe()
	go func() { done <- RunWatchdog(context.Background(), r, dir, slog.New(slog.DiscardHandler)) }()
	io.WriteString(w, "0\n") // the lease lost
	io.WriteString(w, "stop\n")
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !SelfFenced(d) {
		t.Fatal("told 0, the watchdog did not fence")
	}
}

// TestCheckEpoch: a copy without a recorded epoch is of epoch 0; one older than the project's placement
// is refused.
func TestCheckEpoch(t *testing.T) {
	d := t.TempDir()
	if err := CheckEpoch(d, &store.Project{ID: "prj_1"}); err != nil {
		t.Fatal(err)
	}
	p := &store.Project{ID: "prj_1", NodeID: "a"}
	store.MoveProject(p, "b")
	store.MoveProject(p, "b") // not a move
	store.MoveProject(p, "a")
	if p.PlacementEpoch != 2 {
		t.Fatalf("epoch %d after two moves", p.PlacementEpoch)
	}
	if err := CheckEpoch(d, p); err == nil {
		t.Fatal("a copy of epoch 0 accepted for a project of epoch 2")
	}
	if err := RecordEpoch(d, 2); err != nil {
		t.Fatal(err)
	}
	if err := CheckEpoch(d, p); err != nil {
		t.Fatal(err)
	}
}
