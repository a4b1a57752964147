package pglog

import (
	"strings"
	"testing"
)

func TestRedact(t *testing.T) {
	for _, c := range []struct {
		name               string
		statement, message string // input
		wantStmt, wantMsg  string // "" : not checked
		secrets            []string
	}{
		{name: "password", statement: `ALTER ROLE bob PASSWORD 'hunter2'`,
			wantStmt: `ALTER ROLE bob PASSWORD '********'`, secrets: []string{"hunter2"}},
		{name: "log_statement message", message: `statement: ALTER ROLE bob PASSWORD 'hunter2'`,
			wantMsg: `statement: ALTER ROLE bob PASSWORD '********'`, secrets: []string{"hunter2"}},
		{name: "encrypted, and the next string is kept", statement: `alter role bob encrypted password 'hunter2' valid until '2027-01-01'`,
			wantStmt: `alter role bob encrypted password '********' valid until '2027-01-01'`, secrets: []string{"hunter2"}},
		{name: "mixed case", statement: `CREATE ROLE bob LOGIN PaSsWoRd 'hunter2'`,
			wantStmt: `CREATE ROLE bob LOGIN PaSsWoRd '********'`, secrets: []string{"hunter2"}},
		{name: "doubled quotes", statement: `ALTER ROLE bob PASSWORD 'hun''ter2'`,
			wantStmt: `ALTER ROLE bob PASSWORD '********'`, secrets: []string{"hun", "ter2"}},
		{name: "E string with an escaped quote", statement: `ALTER ROLE bob PASSWORD E'hun\'ter2'`,
			wantStmt: `ALTER ROLE bob PASSWORD E'********'`, secrets: []string{"hun", "ter2"}},
		{name: "E string ending in a backslash", statement: `ALTER ROLE bob PASSWORD e'hunter2\\' LOGIN`,
			wantStmt: `ALTER ROLE bob PASSWORD e'********' LOGIN`, secrets: []string{"hunter2"}},
		{name: "standard string ending in a backslash: masks too much, never too little", statement: `ALTER ROLE bob PASSWORD 'hunter2\' LOGIN`,
			secrets: []string{"hunter2"}},
		{name: "unicode string", statement: `ALTER ROLE bob PASSWORD U&'hunt\0065r2'`,
			wantStmt: `ALTER ROLE bob PASSWORD U&'********'`, secrets: []string{"hunt", "0065r2"}},
		{name: "dollar quotes", statement: `ALTER ROLE bob PASSWORD $$hunter2$$`,
			wantStmt: `ALTER ROLE bob PASSWORD $$********$$`, secrets: []string{"hunter2"}},
		{name: "tagged dollar quotes with $$ inside", statement: `ALTER ROLE bob PASSWORD $pw$hun$$ter2$pw$ LOGIN`,
			wantStmt: `ALTER ROLE bob PASSWORD $pw$********$pw$ LOGIN`, secrets: []string{"hun", "ter2"}},
		{name: "dollar quotes right after the keyword", statement: `ALTER ROLE bob PASSWORD$$hunter2$$`,
			secrets: []string{"hunter2"}},
		{name: "no space", statement: `ALTER ROLE bob PASSWORD'hunter2'`,
			wantStmt: `ALTER ROLE bob PASSWORD'********'`, secrets: []string{"hunter2"}},
		{name: "new line and tab", statement: "ALTER ROLE bob PASSWORD\n\t'hunter2'",
			wantStmt: "ALTER ROLE bob PASSWORD\n\t'********'", secrets: []string{"hunter2"}},
		{name: "block comment", statement: `ALTER ROLE bob PASSWORD /* a /* nested */ comment */ 'hunter2'`,
			wantStmt: `ALTER ROLE bob PASSWORD /* a /* nested */ comment */ '********'`, secrets: []string{"hunter2"}},
		{name: "line comment", statement: "ALTER ROLE bob PASSWORD -- the password\n'hunter2'",
			wantStmt: "ALTER ROLE bob PASSWORD -- the password\n'********'", secrets: []string{"hunter2"}},
		{name: "two statements", statement: `CREATE ROLE a PASSWORD 'first1'; CREATE ROLE b PASSWORD 'second2';`,
			wantStmt: `CREATE ROLE a PASSWORD '********'; CREATE ROLE b PASSWORD '********';`, secrets: []string{"first1", "second2"}},
		{name: "SCRAM verifier", statement: `ALTER ROLE bob PASSWORD 'SCRAM-SHA-256$4096:c2FsdA==$c3Rvcg==:c2Vydg=='`,
			wantStmt: `ALTER ROLE bob PASSWORD '********'`, secrets: []string{"c2FsdA", "c3Rvcg", "c2Vydg"}},
		{name: "PASSWORD NULL is kept", statement: `ALTER ROLE bob PASSWORD NULL`, wantStmt: `ALTER ROLE bob PASSWORD NULL`},
		{name: "unterminated", statement: `ALTER ROLE bob PASSWORD 'hunter2 LOGIN`,
			message:  `unterminated quoted string at or near "'hunter2 LOGIN"`,
			wantStmt: `ALTER ROLE bob PASSWORD '********`, secrets: []string{"hunter2"}},
		{name: "bare word (syntax error)", statement: `ALTER ROLE bob PASSWORD hunter2`,
			message:  `syntax error at or near "hunter2"`,
			wantStmt: `ALTER ROLE bob PASSWORD ********`, wantMsg: `syntax error at or near "********"`, secrets: []string{"hunter2"}},
		{name: "bare word with punctuation", statement: `ALTER ROLE bob PASSWORD hunter2!x;`,
			message:  `syntax error at or near "hunter2"`,
			wantStmt: `ALTER ROLE bob PASSWORD ********;`, wantMsg: `syntax error at or near "********"`, secrets: []string{"hunter2", "!x"}},
		{name: "numeric junk (PostgreSQL 15 shows a prefix)", statement: `ALTER ROLE bob PASSWORD 123hunter`,
			message: `trailing junk after numeric literal at or near "123h"`,
			wantMsg: `trailing junk after numeric literal at or near "********"`, secrets: []string{"123h", "hunter"}},
		{name: "user mapping options", statement: `CREATE USER MAPPING FOR bob SERVER fs OPTIONS (user 'u', password 'hunter2')`,
			wantStmt: `CREATE USER MAPPING FOR bob SERVER fs OPTIONS (user 'u', password '********')`, secrets: []string{"hunter2"}},
		{name: "subscription connection string", statement: `CREATE SUBSCRIPTION s CONNECTION 'host=x password=hunter2' PUBLICATION p`,
			wantStmt: `CREATE SUBSCRIPTION s CONNECTION 'host=x password=********' PUBLICATION p`, secrets: []string{"hunter2"}},
		{name: "connection string, more after", statement: `CREATE SUBSCRIPTION s CONNECTION 'host=x password=hunter2 user=y' PUBLICATION p`,
			wantStmt: `CREATE SUBSCRIPTION s CONNECTION 'host=x password=******** user=y' PUBLICATION p`, secrets: []string{"hunter2"}},
		{name: "quoted value inside an SQL string", statement: `CREATE SUBSCRIPTION s CONNECTION 'host=x password=''a b'' user=y' PUBLICATION p`,
			wantStmt: `CREATE SUBSCRIPTION s CONNECTION 'host=x password=''********'' user=y' PUBLICATION p`, secrets: []string{"a b"}},
		{name: "quoted value", message: `could not connect: host=x password='a b' user=y`,
			wantMsg: `could not connect: host=x password='********' user=y`, secrets: []string{"a b"}},
		{name: "quoted value with escapes", message: `host=x password='it\'s a b\\' user=y`,
			wantMsg: `host=x password='********' user=y`, secrets: []string{"it", "a b"}},
		{name: "backslash-quoted value inside an E string", statement: `SELECT dblink_connect(E'host=x password=\'a b\' user=y')`,
			wantStmt: `SELECT dblink_connect(E'host=x password=\'********\' user=y')`, secrets: []string{"a b"}},
		{name: "spaces around =", message: `host=x password = hunter2 user=y`,
			wantMsg: `host=x password = ******** user=y`, secrets: []string{"hunter2"}},
		{name: "sslpassword", message: `host=x sslpassword=hunter2`, wantMsg: `host=x sslpassword=********`, secrets: []string{"hunter2"}},
		{name: "primary_conninfo", statement: `ALTER SYSTEM SET primary_conninfo = 'host=x password=hunter2';`,
			wantStmt: `ALTER SYSTEM SET primary_conninfo = 'host=x password=********';`, secrets: []string{"hunter2"}},
		{name: "URI", statement: `CREATE SUBSCRIPTION s CONNECTION 'postgresql://bob:hunter2@db.example:5432/app' PUBLICATION p`,
			wantStmt: `CREATE SUBSCRIPTION s CONNECTION 'postgresql://bob:********@db.example:5432/app' PUBLICATION p`, secrets: []string{"hunter2"}},
		{name: "URI without user name", message: `postgres://:hunter2@db/app`, wantMsg: `postgres://:********@db/app`, secrets: []string{"hunter2"}},
		{name: "URI query parameter", message: `postgresql://db/app?password=hunter2&sslmode=require`,
			wantMsg: `postgresql://db/app?password=********`, secrets: []string{"hunter2"}},
		{name: "URI without password is kept", message: `postgresql://bob@db:5432/app`, wantMsg: `postgresql://bob@db:5432/app`},
		{name: "JSON", message: `config {"user": "bob", "password": "hunter2"}`,
			wantMsg: `config {"user": "bob", "password": "********"}`, secrets: []string{"hunter2"}},
		{name: "PostgreSQL's own messages are kept", message: `password authentication failed for user "bob"`,
			wantMsg: `password authentication failed for user "bob"`},
		{name: "password_encryption is kept", statement: `SET password_encryption = 'scram-sha-256'`,
			wantStmt: `SET password_encryption = 'scram-sha-256'`},
		{name: "no password", statement: `select 1`, message: `division by zero`, wantStmt: `select 1`, wantMsg: `division by zero`},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := Entry{Statement: c.statement, Message: c.message, Detail: c.message, Hint: c.statement}
			redactEntry(&e)
			if c.wantStmt != "" && e.Statement != c.wantStmt {
				t.Errorf("statement:\n got %s\nwant %s", e.Statement, c.wantStmt)
			}
			if c.wantMsg != "" && e.Message != c.wantMsg {
				t.Errorf("message:\n got %s\nwant %s", e.Message, c.wantMsg)
			}
			for _, s := range c.secrets {
				for name, f := range map[string]string{"statement": e.Statement, "message": e.Message, "detail": e.Detail, "hint": e.Hint} {
					if strings.Contains(f, s) {
						t.Errorf("%s still has %q: %s", name, s, f)
					}
				}
			}
		})
	}
}

// TestRedactRealLines checks the lines that PostgreSQL 15 wrote for the statements in testdata (ALTER
// ROLE … PASSWORD, CREATE USER MAPPING, CREATE SUBSCRIPTION … CONNECTION, failing and logged by
// log_statement): no password survives, in any form the server printed it.
func TestRedactRealLines(t *testing.T) {
	es := realEntries(t)
	masked := 0
	for _, e := range es {
		for name, f := range map[string]string{"message": e.Message, "detail": e.Detail, "hint": e.Hint, "statement": e.Statement} {
			for _, secret := range []string{"hunter2", "hun'ter2", `hun\'ter2`, "hun''ter2", "a b", "unterminated"} {
				if strings.Contains(f, secret) {
					t.Errorf("%s of %+v has %q", name, e, secret)
				}
			}
			if strings.Contains(f, mask) {
				masked++
			}
		}
	}
	if masked < 15 {
		t.Errorf("only %d fields masked", masked)
	}
	want := map[string]bool{
		`ALTER ROLE nosuch PASSWORD '********'`:                                                        false,
		`ALTER ROLE nosuch ENCRYPTED PASSWORD '********'`:                                              false,
		`CREATE SUBSCRIPTION s CONNECTION 'host=x password=********' PUBLICATION p`:                    false,
		`CREATE SUBSCRIPTION s2 CONNECTION 'host=x user=y password=''********''' PUBLICATION p`:        false,
		`CREATE SUBSCRIPTION s3 CONNECTION 'postgresql://y:********@x/db' PUBLICATION p`:               false,
		`ALTER ROLE appuser PASSWORD ********`:                                                         false,
		`statement: CREATE USER MAPPING FOR appuser SERVER fs OPTIONS (user 'u', password '********')`: false,
		`statement: ALTER ROLE appuser PASSWORD E'********'`:                                           false,
		`statement: ALTER ROLE appuser PASSWORD $pw$********$pw$`:                                      false,
		`syntax error at or near "********"`:                                                           false,
	}
	for _, e := range es {
		for _, f := range []string{e.Message, e.Statement} {
			if _, ok := want[f]; ok {
				want[f] = true
			}
		}
	}
	for f, seen := range want {
		if !seen {
			t.Errorf("no field %s", f)
		}
	}
}
