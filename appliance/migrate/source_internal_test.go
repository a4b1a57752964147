package migrate

import (
	"errors"
	"testing"
)

// TestRedactErrMasksOnlyThePassword: the password is masked where it stands as the password, not
// wherever the same characters appear (before, a password "postgres" turned every "postgres" in an
// error into "xxxxx").
func TestRedactErrMasksOnlyThePassword(t *testing.T) {
	src, err := ParseSourceURL("postgres://app:postgres@db.example.com:5432/postgres")
	if err != nil {
		t.Fatal(err)
	}
	in := errors.New(`connect postgres://app:postgres@db.example.com:5432/postgres: database "postgres" of user app; password=postgres`)
	got := src.RedactErr(in).Error()
	want := `connect postgres://app:xxxxx@db.example.com:5432/postgres: database "postgres" of user app; password=xxxxx`
	if got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
}
