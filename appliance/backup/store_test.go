package backup_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/theappliance/appliance/appliance/backup"
)

func TestRemoveProject(t *testing.T) {
	root := t.TempDir()
	d := &backup.DirStore{Root: root}
	if err := d.Prepare("prj_a"); err != nil {
		t.Fatal(err)
	}
	if err := d.Prepare("prj_b"); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{
		filepath.Join(d.WALDir("prj_a"), "000000010000000000000001"),
		filepath.Join(d.BaseDir("prj_a", "k1"), "backup_label"),
		filepath.Join(root, "prj_a", "exports", "exp_1.dump"),
		filepath.Join(d.WALDir("prj_b"), "000000010000000000000001"),
	} {
		if err := os.MkdirAll(filepath.Dir(f), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if removed, err := d.RemoveProject("prj_a"); err != nil || !removed {
		t.Fatalf("remove: %v %v", removed, err)
	}
	if _, err := os.Lstat(filepath.Join(root, "prj_a")); !os.IsNotExist(err) {
		t.Fatalf("prj_a is left: %v", err)
	}
	if _, err := os.Stat(filepath.Join(d.WALDir("prj_b"), "000000010000000000000001")); err != nil {
		t.Fatalf("another project's store was touched: %v", err)
	}
	if removed, err := d.RemoveProject("prj_a"); err != nil || removed {
		t.Fatalf("second remove: %v %v", removed, err)
	}
	for _, bad := range []string{"", ".", "..", "../prj_b", "a/b"} {
		if _, err := d.RemoveProject(bad); err == nil {
			t.Errorf("RemoveProject(%q) accepted", bad)
		}
	}
	if _, err := os.Stat(root); err != nil {
		t.Fatalf("the root is gone: %v", err)
	}
}
