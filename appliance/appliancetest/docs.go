package appliancetest

import (
	"os"
	"strings"
	"testing"
)

// DocSection keeps the text between begin and end in the file at path equal to content (tables the docs
// show that are generated from the code). With UPDATE_DOCS set it rewrites the section; otherwise a
// difference fails the test, saying to run rerun.
func DocSection(t testing.TB, path, begin, end, content, rerun string) {
	t.Helper()
	doc, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	before, rest, ok := strings.Cut(string(doc), begin)
	_, after, ok2 := strings.Cut(rest, end)
	if !ok || !ok2 {
		t.Fatalf("%s lacks the markers %q … %q", path, begin, end)
	}
	want := before + begin + content + end + after
	if want == string(doc) {
		return
	}
	if os.Getenv("UPDATE_DOCS") != "" {
		if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Fatalf("a generated section of %s is out of date: run %s", path, rerun)
}
