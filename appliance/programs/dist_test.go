package programs_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/theappliance/appliance/appliance/postgres"
	"github.com/theappliance/appliance/appliance/programs"
	"github.com/theappliance/appliance/appliance/testtools"
)

func TestParseDists(t *testing.T) {
	got, err := programs.ParseDists("17=npm, 18=/srv/pg18.tgz")
	if err != nil || len(got) != 2 || got[0] != (programs.Dist{Major: 17, Source: "npm"}) || got[1] != (programs.Dist{Major: 18, Source: "/srv/pg18.tgz"}) {
		t.Fatalf("ParseDists: %v %v", got, err)
	}
	for _, bad := range []string{"17", "x=npm", "17=relative.tgz", "17=npm,17=npm", "5=npm", "17="} {
		if _, err := programs.ParseDists(bad); err == nil {
			t.Errorf("ParseDists(%q) accepted", bad)
		}
	}
	if got, err := programs.ParseDists(""); err != nil || len(got) != 0 {
		t.Fatalf("ParseDists(\"\"): %v %v", got, err)
	}
}

// TestDistFromNPMTarball unpacks the npm build of PostgreSQL 17: a server that finds its libraries without
// LD_LIBRARY_PATH, with contrib's extensions and pg_stat_statements, no pg_upgrade and no client tools.
func TestDistFromNPMTarball(t *testing.T) {
	tgz, err := testtools.PostgresTarball(t.Context(), 17)
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(t.TempDir(), "postgres")
	d := programs.Dist{Major: 17, Source: tgz}
	b, err := d.Obtain(t.Context(), root, nil)
	if err != nil {
		t.Fatal(err)
	}
	if b.Major != 17 || b.Dir != filepath.Join(root, "17", "bin") {
		t.Fatalf("binaries %+v", b)
	}
	if len(b.Tools()) != 0 || !strings.Contains(b.Abilities(), "server only") {
		t.Fatalf("tools %v, abilities %q", b.Tools(), b.Abilities())
	}
	if !b.HasExtension("pgcrypto") || !b.HasExtension("pg_stat_statements") || b.HasExtension("hypopg") || !b.HasLibrary("pg_stat_statements") {
		t.Fatal("the npm build's extensions and libraries are not as expected")
	}
	if target, err := os.Readlink(filepath.Join(root, "17", "lib", "libicuuc.so.60")); err != nil || target != "libicuuc.so.60.2" {
		t.Fatalf("pg-symlinks.json's links: %q %v", target, err)
	}
	if majors := postgres.Majors(root); len(majors) != 1 || majors[0].Major != 17 {
		t.Fatalf("Majors: %v", majors)
	}
	// A second Obtain finds it unpacked.
	if again, err := d.Obtain(t.Context(), root, nil); err != nil || again != b {
		t.Fatalf("second Obtain: %+v %v", again, err)
	}
}
