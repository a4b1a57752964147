package main

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/theappliance/appliance"

// TestArchitectureMap: docs/architecture.md names every package of the module, and no package that is
// gone, and every package imports only the packages of ours its row allows (non-test files).
func TestArchitectureMap(t *testing.T) {
	doc, err := os.ReadFile("docs/architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	allowed := mapRows(t, string(doc))
	pkgs := packagesOfModule(t, ".")
	for pkg := range pkgs {
		if _, ok := allowed[pkg]; !ok {
			t.Errorf("package %s is not in docs/architecture.md's map: add its row (what it owns, what it may import)", pkg)
		}
	}
	for pkg := range allowed {
		if _, ok := pkgs[pkg]; !ok {
			t.Errorf("docs/architecture.md names package %s, which does not exist: remove its row", pkg)
		}
	}
	for pkg, imports := range pkgs {
		may, ok := allowed[pkg]
		if !ok {
			continue
		}
		for _, imp := range imports {
			if !slices.Contains(may, imp) {
				t.Errorf("package %s imports %s, which its row in docs/architecture.md does not allow", pkg, imp)
			}
		}
	}
}

var mapRow = regexp.MustCompile("^\\| `([^`]+)` \\|[^|]*\\| (.*) \\|$")

// mapRows reads the table of the map's "Packages" section: package → the packages of ours it may import.
func mapRows(t *testing.T, doc string) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	_, section, _ := strings.Cut(doc, "\n## Packages\n")
	section, _, _ = strings.Cut(section, "\n## ")
	for _, line := range strings.Split(section, "\n") {
		m := mapRow.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		var may []string
		for _, f := range strings.Split(m[2], ",") {
			if f = strings.Trim(strings.TrimSpace(f), "`"); f != "" && f != "—" {
				may = append(may, f)
			}
		}
		out[m[1]] = may
	}
	if len(out) == 0 {
		t.Fatal("docs/architecture.md has no package table")
	}
	return out
}

// packagesOfModule finds the module's packages under root (each folder with Go files, "." for the root)
// and the packages of the module their non-test files import.
func packagesOfModule(t *testing.T, root string) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata" || name == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") {
			return nil
		}
		pkg := filepath.ToSlash(filepath.Dir(path))
		if _, ok := out[pkg]; !ok {
			out[pkg] = nil
		}
		if strings.HasSuffix(name, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		for _, is := range f.Imports {
			imp, _ := strconv.Unquote(is.Path.Value)
			if rel, ok := strings.CutPrefix(imp, module+"/"); ok && !slices.Contains(out[pkg], rel) {
				out[pkg] = append(out[pkg], rel)
			} else if imp == module && !slices.Contains(out[pkg], ".") {
				out[pkg] = append(out[pkg], ".")
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
