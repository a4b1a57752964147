package pglog

import (
	"regexp"
	"slices"
	"strings"
)

// mask replaces a secret.
const mask = "********"

// minSecret is the shortest secret that is also masked wherever else it appears in the entry: shorter
// ones would mask ordinary words.
const minSecret = 3

// redactEntry masks the passwords in e's Message, Detail, Hint and Statement:
//
//   - the string after the word PASSWORD (ALTER ROLE … [ENCRYPTED] PASSWORD '…', OPTIONS (password '…')):
//     '…' with doubled quotes or backslashes inside, E'…', U&'…', $$…$$ and $tag$…$tag$, with comments
//     between; an unterminated string to the end of the text; in the statement, a bare word too (a
//     syntax error) unless it is NULL;
//   - the value after password= or password: (connection strings, also sslpassword= and the like):
//     unquoted up to white space, '…', ”…” (a quoted value inside an SQL string), \'…\', "…";
//   - the password of a URI's user information: postgresql://user:secret@host.
//
// A secret found in one field is then masked wherever it appears in the others (the statement's password
// also appears in "syntax error at or near" and "unterminated quoted string at or near" messages), and a
// message's "at or near" token that overlaps a secret is masked whole. Masking errs on the side of too
// much: a password is never shown, an odd text may lose more than its password.
func redactEntry(e *Entry) {
	if !mayHaveSecret(e.Message) && !mayHaveSecret(e.Detail) && !mayHaveSecret(e.Hint) && !mayHaveSecret(e.Statement) {
		return
	}
	var secrets []string
	e.Statement, secrets = redact(e.Statement, true, secrets)
	e.Message, secrets = redact(e.Message, false, secrets)
	e.Detail, secrets = redact(e.Detail, false, secrets)
	e.Hint, secrets = redact(e.Hint, false, secrets)
	if len(secrets) == 0 {
		return
	}
	e.Message = maskNearToken(e.Message, secrets)
	e.Detail = maskNearToken(e.Detail, secrets)
	e.Hint = maskNearToken(e.Hint, secrets)
	secrets = slices.DeleteFunc(secrets, func(s string) bool { return len(s) < minSecret })
	// Longest first, so that a secret containing another is masked whole.
	slices.SortFunc(secrets, func(a, b string) int { return len(b) - len(a) })
	secrets = slices.Compact(secrets)
	for _, f := range []*string{&e.Message, &e.Detail, &e.Hint, &e.Statement} {
		for _, s := range secrets {
			*f = strings.ReplaceAll(*f, s, mask)
		}
	}
}

// RedactStatement masks the passwords of an SQL text and of the server's error message about it, by
// the rules redactEntry applies to a log entry's statement and message (the studio's history keeps its
// runs this way).
func RedactStatement(statement, message string) (string, string) {
	e := Entry{Statement: statement, Message: message}
	redactEntry(&e)
	return e.Statement, e.Message
}

// mayHaveSecret is the cheap test before the scan.
func mayHaveSecret(s string) bool {
	return indexFold(s, "password", 0) >= 0 || strings.Contains(s, "://")
}

// redact masks the secrets of s (see redactEntry) and appends them to secrets. sql says s is an SQL
// statement: then a bare word after PASSWORD is a secret too.
func redact(s string, sql bool, secrets []string) (string, []string) {
	if s == "" {
		return s, secrets
	}
	var b strings.Builder
	last := 0 // s[:last] is in b
	for i := 0; ; {
		k := indexFold(s, "password", i)
		if k < 0 {
			break
		}
		i = k + len("password")
		if i < len(s) && isIdentChar(s[i]) && s[i] != '$' {
			continue // password_encryption, passwords (but PASSWORD$$x$$ is a dollar-quoted string)
		}
		word := k == 0 || !isIdentChar(s[k-1]) // PASSWORD itself, not sslpassword
		j := skipSpace(s, i)
		if j < len(s) && s[j] == '"' { // a JSON key: "password": "…"
			if k := skipBlanks(s, j+1); k < len(s) && s[k] == ':' {
				j = k
			}
		}
		var from, to int
		switch {
		case j < len(s) && (s[j] == '=' || s[j] == ':'):
			from, to = valueSpan(s, skipBlanks(s, j+1))
		case isLiteralStart(s, j):
			from, to = literalSpan(s, j)
		case sql && word && j < len(s) && !strings.EqualFold(identAt(s, j), "null"):
			from, to = bareSpan(s, j)
			if id := identAt(s, j); len(id) < to-from && len(id) >= minSecret {
				secrets = append(secrets, id) // what the parser's error message shows of it
			}
		}
		if to <= from {
			continue
		}
		secrets = append(secrets, s[from:to])
		b.WriteString(s[last:from])
		b.WriteString(mask)
		last, i = to, to
	}
	if last > 0 {
		b.WriteString(s[last:])
		s = b.String()
	}
	if strings.Contains(s, "://") {
		s = uriPassword.ReplaceAllStringFunc(s, func(m string) string {
			sub := uriPassword.FindStringSubmatchIndex(m)
			if sub[3] <= sub[2] {
				return m
			}
			secrets = append(secrets, m[sub[2]:sub[3]])
			return m[:sub[2]] + mask + m[sub[3]:]
		})
	}
	return s, secrets
}

// uriPassword finds the password of a URI's user information (libpq ends it at '@' or '/').
var uriPassword = regexp.MustCompile(`(?i)\b[a-z][a-z0-9+.\-]*://[^\s/@:]*:([^\s/@]*)@`)

// maskNearToken masks the token of PostgreSQL's `… at or near "token"` when it overlaps a secret: the
// parser shows a part of the statement there, which may be a part of a password.
func maskNearToken(msg string, secrets []string) string {
	const near = `at or near "`
	i := strings.Index(msg, near)
	if i < 0 {
		return msg
	}
	from := i + len(near)
	to := strings.LastIndexByte(msg, '"')
	if to <= from {
		return msg
	}
	tok := msg[from:to]
	for _, s := range secrets {
		if s == "" {
			continue
		}
		if strings.Contains(s, tok) || (len(s) >= minSecret && strings.Contains(tok, s)) {
			return msg[:from] + mask + msg[to:]
		}
	}
	return msg
}

// valueSpan is the secret of a connection string's value starting at v.
func valueSpan(s string, v int) (int, int) {
	rest := s[v:]
	switch {
	case strings.HasPrefix(rest, "''"): // a quoted value inside an SQL string: ''a b''
		return v + 2, closeAt(s, v+2, "''")
	case strings.HasPrefix(rest, `\'`), strings.HasPrefix(rest, `\"`):
		return v + 2, closeAt(s, v+2, rest[:2])
	case strings.HasPrefix(rest, "'"), strings.HasPrefix(rest, `"`):
		return literalSpan(s, v)
	}
	return bareSpan(s, v)
}

// closeAt is the index of the next tok from i that no backslash escapes, or len(s).
func closeAt(s string, i int, tok string) int {
	for i < len(s) {
		if s[i] == '\\' && tok[0] != '\\' {
			i += 2
			continue
		}
		if strings.HasPrefix(s[i:], tok) {
			return i
		}
		i++
	}
	return len(s)
}

// bareSpan is an unquoted value: up to white space, less the closing characters of what holds it
// (the quote of an SQL string, a parenthesis, a comma, a semicolon).
func bareSpan(s string, v int) (int, int) {
	e := v
	for e < len(s) && !isSpace(s[e]) {
		e++
	}
	for e > v && strings.IndexByte(`'")};,`, s[e-1]) >= 0 {
		e--
	}
	return v, e
}

// isLiteralStart reports whether an SQL string constant starts at j: '…', "…", E'…', U&'…' (any
// letter prefix), $$…$$ or $tag$…$tag$.
func isLiteralStart(s string, j int) bool {
	if j >= len(s) {
		return false
	}
	switch c := s[j]; {
	case c == '\'' || c == '"':
		return true
	case c == '$':
		return dollarTag(s, j) != ""
	case isLetter(c):
		r := s[j+1:]
		return strings.HasPrefix(r, "'") || strings.HasPrefix(r, "&'")
	}
	return false
}

// literalSpan is the content of the string constant at j (isLiteralStart): up to its closing quote
// (doubled quotes and backslash escapes inside), or to the end of s when it has none.
func literalSpan(s string, j int) (int, int) {
	if s[j] == '$' {
		tag := dollarTag(s, j)
		from := j + len(tag)
		if k := strings.Index(s[from:], tag); k >= 0 {
			return from, from + k
		}
		return from, len(s)
	}
	for s[j] != '\'' && s[j] != '"' {
		j++ // the prefix: E, U&, N…
	}
	q := s[j]
	i := j + 1
	for i < len(s) {
		switch {
		case s[i] == '\\':
			i += 2
			continue
		case s[i] == q && i+1 < len(s) && s[i+1] == q:
			i += 2
			continue
		case s[i] == q:
			return j + 1, i
		}
		i++
	}
	return j + 1, len(s)
}

// dollarTag returns the $tag$ or $$ at j, or "".
func dollarTag(s string, j int) string {
	for i := j + 1; i < len(s); i++ {
		c := s[i]
		if c == '$' {
			return s[j : i+1]
		}
		if !(isLetter(c) || c == '_' || (i > j+1 && c >= '0' && c <= '9')) {
			return ""
		}
	}
	return ""
}

// skipSpace skips white space and SQL comments (-- to the end of the line, nested /* */).
func skipSpace(s string, i int) int {
	for i < len(s) {
		switch {
		case isSpace(s[i]):
			i++
		case strings.HasPrefix(s[i:], "--"):
			for i < len(s) && s[i] != '\n' {
				i++
			}
		case strings.HasPrefix(s[i:], "/*"):
			depth := 0
			for i < len(s) {
				if strings.HasPrefix(s[i:], "/*") {
					depth++
					i += 2
				} else if strings.HasPrefix(s[i:], "*/") {
					depth--
					i += 2
					if depth == 0 {
						break
					}
				} else {
					i++
				}
			}
		default:
			return i
		}
	}
	return i
}

// skipBlanks skips white space.
func skipBlanks(s string, i int) int {
	for i < len(s) && isSpace(s[i]) {
		i++
	}
	return i
}

// identAt returns the identifier characters at j.
func identAt(s string, j int) string {
	e := j
	for e < len(s) && isIdentChar(s[e]) {
		e++
	}
	return s[j:e]
}

// indexFold is the index of the ASCII word w (lowercase) in s from i, ignoring case, or -1.
func indexFold(s, w string, i int) int {
	for ; i+len(w) <= len(s); i++ {
		if s[i]|0x20 == w[0] && strings.EqualFold(s[i:i+len(w)], w) {
			return i
		}
	}
	return -1
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'
}
func isLetter(c byte) bool { return c|0x20 >= 'a' && c|0x20 <= 'z' }
func isIdentChar(c byte) bool {
	return isLetter(c) || c == '_' || c == '$' || (c >= '0' && c <= '9') || c >= 0x80
}
