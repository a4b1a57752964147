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

// TestDistFromBinDirectory links an installation on disk (--pg-dist 17=<bin directory>): Debian 13's
// PostgreSQL 17, used where it is, with pg_upgrade and the client tools. A directory that is not a bin
// directory of that major is refused, and a distribution unpacked before is never replaced.
func TestDistFromBinDirectory(t *testing.T) {
	bin, err := testtools.DebianPostgres(t.Context(), 17)
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(t.TempDir(), "postgres")
	d := programs.Dist{Major: 17, Source: bin}
	b, err := d.Obtain(t.Context(), root, nil)
	if err != nil {
		t.Fatal(err)
	}
	if target, err := os.Readlink(filepath.Join(root, "17")); err != nil || target != filepath.Dir(bin) {
		t.Fatalf("the link: %q %v", target, err)
	}
	if b.Major != 17 || b.Dir != filepath.Join(root, "17", "bin") || !b.HasClientTools() || !strings.HasPrefix(b.Abilities(), "server, pg_upgrade: upgrades to it by pg_upgrade; client tools: ") {
		t.Fatalf("binaries %+v: %q", b, b.Abilities())
	}
	// Its share directory is found through the link (extensions), its modules too.
	if !b.HasExtension("pgcrypto") || !b.HasExtension("pg_stat_statements") || !b.HasLibrary("pg_stat_statements") || b.HasExtension("hypopg") {
		t.Fatal("Debian 13's 17: extensions and libraries are not as expected")
	}
	if majors := postgres.Majors(root); len(majors) != 1 || majors[0] != b {
		t.Fatalf("Majors: %v", majors)
	}
	if again, err := d.Obtain(t.Context(), root, nil); err != nil || again != b {
		t.Fatalf("second Obtain: %+v %v", again, err)
	}
	for _, bad := range []programs.Dist{{Major: 17, Source: filepath.Dir(bin)}, {Major: 16, Source: bin}, {Major: 15, Source: "/usr/lib/postgresql/15/bin"}} {
		other := filepath.Join(t.TempDir(), "postgres")
		if bad.Major == 15 { // a distribution unpacked there before stays
			if err := os.MkdirAll(filepath.Join(other, "15", "bin"), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := bad.Obtain(t.Context(), other, nil); err == nil {
			t.Errorf("Obtain %+v accepted", bad)
		}
	}
}
