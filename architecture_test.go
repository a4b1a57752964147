package main

import (
	"errors"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"io/fs"
	"maps"
	"os"
	"os/exec"
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

// maxRootCycle is the most files of the root package `appliance` that may call each other in one cycle
// (file A calls a function declared in file B, and back through any path). Issue 26 measured 41 of 63 at
// ceb06df; the goal is 10. Lower it whenever an area moves out; the test fails when the cycle grows.
const maxRootCycle = 9

// TestRootCallCycle measures the biggest set of the root package's non-test files that call each other in
// a cycle (a strongly connected component of the file call graph), type-checked from source so that a
// method call resolves to the file that declares that method.
func TestRootCallCycle(t *testing.T) {
	files, cycle := rootCallCycle(t, "appliance")
	t.Logf("%d of %d non-test files of the root package call each other in one cycle: %s", len(cycle), files, strings.Join(cycle, " "))
	if len(cycle) > maxRootCycle {
		t.Errorf("%d files of the root package now call each other in one cycle, more than %d: keep new areas in their own packages", len(cycle), maxRootCycle)
	}
}

// exportImporter imports the packages pkg imports from the compiler's export data, which `go list
// -export` builds or finds in the build cache (go test has just compiled them): type-checking every
// dependency from source instead took minutes on two cores.
func exportImporter(t *testing.T, fset *token.FileSet, pkg string) types.Importer {
	t.Helper()
	out, err := exec.Command("go", "list", "-export", "-deps", "-f", "{{.ImportPath}}\t{{.Export}}", pkg).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("go list -export %s: %v\n%s", pkg, err, ee.Stderr)
		}
		t.Fatalf("go list -export %s: %v", pkg, err)
	}
	exports := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if path, file, ok := strings.Cut(line, "\t"); ok && file != "" {
			exports[path] = file
		}
	}
	return importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		file, ok := exports[path]
		if !ok {
			return nil, fmt.Errorf("no export data of %s in go list's answer", path)
		}
		return os.Open(file)
	})
}

// rootCallCycle returns how many non-test files the package in dir has and the largest set of them that
// call each other in a cycle (sorted).
func rootCallCycle(t *testing.T, dir string) (int, []string) {
	t.Helper()
	fset := token.NewFileSet()
	var files []*ast.File
	names, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	info := &types.Info{Uses: map[*ast.Ident]types.Object{}}
	conf := types.Config{Importer: exportImporter(t, fset, "./"+dir)}
	pkg, err := conf.Check(module+"/"+dir, fset, files, info)
	if err != nil {
		t.Fatal(err)
	}
	calls := map[string][]string{} // file → the files declaring functions it uses
	for id, obj := range info.Uses {
		fn, ok := obj.(*types.Func)
		if !ok || fn.Pkg() != pkg {
			continue
		}
		from, to := filepath.Base(fset.Position(id.Pos()).Filename), filepath.Base(fset.Position(fn.Pos()).Filename)
		if from != to && !slices.Contains(calls[from], to) {
			calls[from] = append(calls[from], to)
		}
	}
	// Tarjan's strongly connected components.
	index, low, onStack := map[string]int{}, map[string]int{}, map[string]bool{}
	var stack, largest []string
	var visit func(v string)
	visit = func(v string) {
		index[v], low[v] = len(index), len(index)
		stack = append(stack, v)
		onStack[v] = true
		for _, w := range calls[v] {
			if _, seen := index[w]; !seen {
				visit(w)
				low[v] = min(low[v], low[w])
			} else if onStack[w] {
				low[v] = min(low[v], index[w])
			}
		}
		if low[v] != index[v] {
			return
		}
		var component []string
		for {
			w := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			onStack[w] = false
			component = append(component, w)
			if w == v {
				break
			}
		}
		if len(component) > len(largest) {
			largest = component
		}
	}
	for _, f := range files {
		if name := filepath.Base(fset.Position(f.Pos()).Filename); !slices.Contains(slices.Collect(maps.Keys(index)), name) {
			visit(name)
		}
	}
	slices.Sort(largest)
	return len(files), largest
}
