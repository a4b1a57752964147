package node

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// TestServicePathsCoverConfig: every path setting of Config (a string field whose name says it holds a
// directory, a file, a cache or a root, or whose default is an absolute path) is either one up writes
// under — and then ServicePaths, the unit's ReadWritePaths=, holds it — or one it only reads: a new path
// setting in neither list fails here, so the service's ProtectSystem=strict cannot silently forbid it.
func TestServicePathsCoverConfig(t *testing.T) {
	typ := reflect.TypeOf(Config{})
	def := reflect.ValueOf(Defaults())
	cfg := Defaults()
	set := reflect.ValueOf(&cfg).Elem()
	dir := t.TempDir()
	for i := 0; i < typ.NumField(); i++ {
		f := typ.Field(i)
		if f.Type.Kind() != reflect.String {
			continue
		}
		pathLike := filepath.IsAbs(def.Field(i).String())
		for _, suffix := range []string{"Dir", "File", "Cache", "Root", "Bin", "Path"} {
			pathLike = pathLike || strings.HasSuffix(f.Name, suffix)
		}
		written, read := slices.Contains(writtenPaths, f.Name), slices.Contains(readPaths, f.Name)
		switch {
		case pathLike && written == read:
			t.Errorf("Config.%s names a path: list it in exactly one of writtenPaths (up writes there: the service's ReadWritePaths=) and readPaths (service.go)", f.Name)
		case !pathLike && (written || read):
			t.Errorf("Config.%s is listed as a path but does not look like one", f.Name)
		}
		if written {
			set.Field(i).SetString(filepath.Join(dir, f.Name))
		}
	}
	paths, err := ServicePaths(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range writtenPaths {
		if want := filepath.Join(dir, name); !slices.Contains(paths, want) {
			t.Errorf("ServicePaths %v lacks %s's %s", paths, name, want)
		}
	}
	// The defaults: the data directory, and embedded-postgres' cache in the home directory.
	paths, err = ServicePaths(Defaults())
	if err != nil {
		t.Fatal(err)
	}
	home, _ := os.UserHomeDir()
	if abs, _ := filepath.Abs(Defaults().DataDir); !slices.Equal(paths, []string{abs, filepath.Join(home, ".embedded-postgres-go")}) {
		t.Errorf("ServicePaths of the defaults: %v", paths)
	}
	bad := Defaults()
	bad.DataDir = filepath.Join(dir, "with space")
	if _, err := ServicePaths(bad); err == nil || !strings.Contains(err.Error(), "white space") {
		t.Errorf("a data directory with a space: %v", err)
	}
	bad.DataDir, bad.Ephemeral = dir, true
	if _, err := ServicePaths(bad); err == nil {
		t.Error("an ephemeral service's paths: no error")
	}
}
