package studio

import "testing"

// TestLiteral: a default's text is one string literal whatever standard_conforming_strings says.
func TestLiteral(t *testing.T) {
	for in, want := range map[string]string{"abc": "'abc'", "it's": "'it''s'", `a\'b`: `E'a\\''b'`, "": "''"} {
		if got, err := literal(in); err != nil || got != want {
			t.Errorf("literal(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := literal("a\x00b"); err == nil {
		t.Error("a NUL was quoted")
	}
}

// TestTypePattern: the type names the editor writes, and nothing that could end a type.
func TestTypePattern(t *testing.T) {
	for _, ok := range []string{"text", "bigint", "numeric(10,2)", "numeric(10, 2)", "character varying(20)", "timestamp(3) with time zone", "public.mood", "text[]", "int[][]", "double precision"} {
		if !typePattern.MatchString(ok) {
			t.Errorf("%q refused", ok)
		}
	}
	for _, bad := range []string{"", "int); DROP TABLE x; --", "text DEFAULT 'x'", `"Mood"`, "int -- c", "int/**/", "numeric(1,2,3)", "text[1]", "a.b.c"} {
		if typePattern.MatchString(bad) {
			t.Errorf("%q accepted", bad)
		}
	}
}
