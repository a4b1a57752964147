package studio

import (
	"encoding/json"
	"testing"

	"github.com/jackc/pgx/v5/pgtype"
)

// TestArrayText: array text as PostgreSQL writes it becomes JSON arrays, quoting and NULL included; what
// does not parse stays the server's text.
func TestArrayText(t *testing.T) {
	for _, c := range []struct {
		oid       uint32
		src, want string
	}{
		{pgtype.Int4ArrayOID, `{1,NULL,3}`, `[1,null,3]`},
		{pgtype.Int8ArrayOID, `{{1,2},{3,4}}`, `[["1","2"],["3","4"]]`},
		{pgtype.TextArrayOID, `{"a,b","say \"hi\"","back\\slash","NULL",""," sp ",plain}`, `["a,b","say \"hi\"","back\\slash","NULL",""," sp ","plain"]`},
		{pgtype.TextArrayOID, `{}`, `[]`},
		{pgtype.Int4ArrayOID, `[0:1]={7,8}`, `[7,8]`},
		{pgtype.BoolArrayOID, `{t,f}`, `[true,false]`},
		{pgtype.TextArrayOID, `{"unterminated}`, `"{\"unterminated}"`},
		{pgtype.Int4ArrayOID, `{1,2`, `"{1,2"`},
	} {
		if got := string(value(c.oid, []byte(c.src))); got != c.want {
			t.Errorf("%s: got %s, want %s", c.src, got, c.want)
		}
	}
}

// TestArrayLiteralRoundTrip: a JSON array written as array text parses back to the same JSON.
func TestArrayLiteralRoundTrip(t *testing.T) {
	in := []any{"a,b", `q"uote`, `back\slash`, nil, "", []any{"x"}}
	lit, err := ArrayLiteral(in[:5])
	if err != nil {
		t.Fatal(err)
	}
	got := value(pgtype.TextArrayOID, []byte(lit))
	want, _ := json.Marshal(in[:5])
	if string(got) != string(want) {
		t.Fatalf("%s → %s, want %s", lit, got, want)
	}
	if lit, _ := ArrayLiteral([]any{[]any{json.Number("1"), json.Number("2")}, []any{json.Number("3"), nil}}); lit != `{{"1","2"},{"3",NULL}}` {
		t.Fatalf("nested: %s", lit)
	}
}
