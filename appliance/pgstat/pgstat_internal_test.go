package pgstat

import "testing"

func TestQueryHash(t *testing.T) {
	h := QueryHash("app", "SELECT * FROM t WHERE a = $1")
	if len(h) != 32 || h != QueryHash("app", "SELECT *\n\tFROM t  WHERE a = $1 ") {
		t.Errorf("hash %q, or white space matters", h)
	}
	if h == QueryHash("other", "SELECT * FROM t WHERE a = $1") || h == QueryHash("app", "SELECT * FROM t WHERE b = $1") {
		t.Error("the database or the text does not matter")
	}
	if QueryHash("ab", "c") == QueryHash("a", "bc") {
		t.Error("database and text run together")
	}
}
