package studio

import (
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// A session goes back to its pool after DISCARD ALL, which undoes whatever a text left in it (settings,
// prepared statements, temporary tables, LISTENs, advisory locks, cursors, sequence state, cached plans).
// That costs a round trip per run; Run marks a session that provably kept none of it (leftNothing), and the
// pool's AfterRelease skips DISCARD ALL for that one use only. Proof takes all of: the text passes
// inertText, the run succeeded, the session is idle (no transaction open), and none of the settings the
// server reports (ParameterStatus) changed. Anything else is reset as before.

// keepSession is the key in a session's CustomData that Run sets when a use left nothing behind.
const keepSession = "studio.keep"

// reportedSettings are the settings PostgreSQL 15 reports to the client when they change (GUC_REPORT).
var reportedSettings = []string{"application_name", "client_encoding", "DateStyle", "default_transaction_read_only",
	"in_hot_standby", "integer_datetimes", "IntervalStyle", "is_superuser", "server_encoding", "server_version",
	"session_authorization", "standard_conforming_strings", "TimeZone"}

func reportedSnapshot(conn *pgconn.PgConn) []string {
	out := make([]string, len(reportedSettings))
	for i, k := range reportedSettings {
		out[i] = conn.ParameterStatus(k)
	}
	return out
}

// markKept records on the session that this use left nothing behind (so AfterRelease may skip DISCARD ALL).
func markKept(conn *pgconn.PgConn, before []string) {
	if conn.TxStatus() != 'I' {
		return
	}
	for i, k := range reportedSettings {
		if conn.ParameterStatus(k) != before[i] {
			return
		}
	}
	conn.CustomData()[keepSession] = true
}

// takeKept reports whether the session's last use was marked as leaving nothing, and clears the mark.
func takeKept(conn *pgconn.PgConn) bool {
	data := conn.CustomData()
	kept := data[keepSession] == true
	delete(data, keepSession)
	return kept
}

// inertText reports whether text is, by a conservative reading of its tokens, one query that reads no
// relation and calls only built-in functions that keep no session state: SELECT or VALUES (or EXPLAIN,
// without ANALYZE, of one) over literals, operators, casts to built-in types and the functions of
// inertFunctions, whose only FROM items are calls of the set-returning ones among them. False whenever it
// is unsure: a relation (a view or a policy can call anything), an unknown function, INTO, FOR, WITH, a
// second statement, a quoted identifier, a dollar quote.
//
// It assumes that these names resolve to PostgreSQL's own functions, types and operators, as they do unless
// a search_path names pg_catalog after a schema holding look-alikes (docs/api-decisions.md "Studio").
func inertText(text string) bool {
	toks, ok := tokens(text)
	if !ok || len(toks) == 0 {
		return false
	}
	if toks[len(toks)-1].s == ";" {
		toks = toks[:len(toks)-1]
	}
	i := 0
	if toks[0].s == "explain" {
		i = 1
		if i < len(toks) && toks[i].s == "verbose" {
			i++
		}
	}
	if i >= len(toks) || toks[i].s != "select" && toks[i].s != "values" {
		return false
	}
	aliasFrom, aliasEnd := -1, -1 // the alias part of the last FROM call, read by fromCall
	for ; i < len(toks); i++ {
		if i == aliasFrom && aliasEnd > aliasFrom {
			i, aliasFrom = aliasEnd-1, -1
			continue
		}
		t := toks[i]
		next := func(k int) string {
			if i+k < len(toks) {
				return toks[i+k].s
			}
			return ""
		}
		switch t.kind {
		case tokString, tokNumber:
			continue
		case tokPunct:
			switch t.s {
			case ";":
				return false // a second statement
			case "::":
				if !inertTypes[next(1)] {
					return false
				}
				i++ // the type name
				if next(1) == "(" {
					i++ // its modifier: numeric(10, 2), varchar(5)
				}
				continue
			case ".": // only alias.*: alias.name may call name(alias), a function of anyone's
				if next(1) != "*" {
					return false
				}
			}
			if !inertPunct[t.s] {
				return false
			}
			continue
		}
		// A word: a keyword, a name.
		switch {
		case t.s == "from":
			if aliasFrom, aliasEnd = fromCall(toks, i+1); aliasFrom < 0 {
				return false
			}
		case next(1) == "(":
			if i > 0 && toks[i-1].s == "." || !inertFunctions[t.s] && !inertKeywords[t.s] {
				return false // a qualified call may name anyone's function
			}
		case inertKeywords[t.s]:
		case i+1 < len(toks) && toks[i+1].kind == tokString:
			if !inertTypes[t.s] { // a typed literal: date '2024-01-01'
				return false
			}
		case deniedWords[t.s]:
			return false
		default:
			// a type's second word (double precision), a FROM call's alias or one of its columns, an output
			// name: nothing else can stand here without failing one of the rules above
		}
	}
	return true
}

// fromCall reads the FROM item starting at toks[i]: one call of a set-returning function of
// inertFunctions, with an optional WITH ORDINALITY and alias (with column names), followed by nothing that
// adds another item. It returns where the part after the call's parentheses starts and ends (-1, -1: the
// item is something else).
func fromCall(toks []token, i int) (aliasFrom, aliasEnd int) {
	if i+1 >= len(toks) || toks[i].kind != tokWord || !inertSetReturning[toks[i].s] || toks[i+1].s != "(" {
		return -1, -1
	}
	i = closing(toks, i+1) + 1
	if i == 0 {
		return -1, -1
	}
	aliasFrom = i
	if i+1 < len(toks) && toks[i].s == "with" && toks[i+1].s == "ordinality" {
		i += 2
	}
	if i < len(toks) && toks[i].s == "as" {
		i++
	}
	if i < len(toks) && toks[i].kind == tokWord && !clauseWords[toks[i].s] && !joinWords[toks[i].s] {
		i++
		if i < len(toks) && toks[i].s == "(" {
			if i = closing(toks, i) + 1; i == 0 {
				return -1, -1
			}
		}
	}
	if i < len(toks) && (toks[i].s == "," || joinWords[toks[i].s]) {
		return -1, -1
	}
	return aliasFrom, i
}

// closing is the index of the parenthesis closing the one at toks[open], or -1.
func closing(toks []token, open int) int {
	depth := 0
	for j := open; j < len(toks); j++ {
		switch toks[j].s {
		case "(":
			depth++
		case ")":
			if depth--; depth == 0 {
				return j
			}
		}
	}
	return -1
}

func set(words string) map[string]bool {
	m := map[string]bool{}
	for _, w := range strings.Fields(words) {
		m[w] = true
	}
	return m
}

var (
	// inertSetReturning are the set-returning functions a FROM item may call.
	inertSetReturning = set(`generate_series unnest generate_subscripts regexp_matches regexp_split_to_table
		string_to_table json_array_elements jsonb_array_elements json_each jsonb_each json_each_text jsonb_each_text`)
	// inertFunctions are built-in functions that read nothing but their arguments and keep no session state.
	inertFunctions = merge(inertSetReturning, set(`abs ceil ceiling floor round trunc sqrt cbrt power exp ln log
		log10 sign mod div pi degrees radians sin cos tan asin acos atan atan2 random width_bucket
		length char_length character_length octet_length bit_length lower upper initcap md5 sha224 sha256 sha384
		sha512 concat concat_ws substr substring left right replace repeat reverse lpad rpad btrim ltrim rtrim
		trim split_part strpos position starts_with translate ascii chr format quote_literal quote_nullable
		regexp_replace regexp_match regexp_like to_hex encode decode convert_to convert_from
		to_char to_number to_date to_timestamp make_date make_time make_timestamp make_timestamptz make_interval
		now clock_timestamp statement_timestamp transaction_timestamp timeofday date_trunc date_part date_bin
		extract age justify_days justify_hours justify_interval isfinite
		array_length array_lower array_upper array_dims cardinality array_append array_prepend array_cat
		array_position array_positions array_remove array_replace array_to_string string_to_array
		count sum avg min max bool_and bool_or every array_agg string_agg json_agg jsonb_agg json_object_agg
		jsonb_object_agg stddev stddev_pop stddev_samp variance var_pop var_samp percentile_cont
		percentile_disc mode row_number rank dense_rank percent_rank cume_dist ntile lag lead first_value
		last_value nth_value
		to_json to_jsonb json_build_object jsonb_build_object json_build_array jsonb_build_array jsonb_pretty
		json_typeof jsonb_typeof jsonb_set jsonb_insert jsonb_strip_nulls json_object jsonb_object
		array_to_json row_to_json jsonb_path_query_array jsonb_path_exists
		gen_random_uuid int4range int8range numrange tsrange tstzrange daterange lower_inf upper_inf isempty
		num_nonnulls num_nulls pg_typeof version`))
	// inertKeywords may stand anywhere, some before a parenthesis (EXISTS (…), IN (…), ARRAY(…), OVER (…)).
	inertKeywords = set(`select values explain verbose distinct on all as from where group by having order
		asc desc nulls first last limit offset fetch next rows row only ties union intersect except and or not
		is null true false case when then else end in between symmetric like ilike similar to escape exists any some
		array filter over partition range preceding following unbounded current window coalesce nullif
		greatest least cast isnull notnull unknown at time zone interval collate within`)
	// inertTypes are built-in type names a cast or a typed literal may name.
	inertTypes = set(`int int2 int4 int8 integer smallint bigint numeric decimal real float float4 float8 double
		precision text varchar char character varying bool boolean date time timestamp timestamptz timetz
		interval json jsonb uuid bytea inet cidr macaddr point money bit varbit name oid`)
	// deniedWords are never inert, wherever they stand.
	deniedWords = set(`into for with table lateral join lock set listen notify prepare execute declare
		create insert update delete merge copy call do begin commit rollback savepoint discard reset`)
	clauseWords = set(`where group having order limit offset fetch window union intersect except on`)
	joinWords   = set(`join cross natural inner left right full lateral`)
	inertPunct  = set(`( ) , . [ ] + - * / % ^ = < > <= >= <> != || ~ ~* !~ !~* ->> -> #> #>> @> <@ ? ?| ?& && : ;`)
)

func merge(a, b map[string]bool) map[string]bool {
	for k := range a {
		b[k] = true
	}
	return b
}

type tokenKind int

const (
	tokWord tokenKind = iota
	tokString
	tokNumber
	tokPunct
)

type token struct {
	kind tokenKind
	s    string // a word lowercased; a string literal's text is not kept
}

// tokens splits text into words, literals and operators, skipping comments. ok is false for what this
// reading does not handle (quoted identifiers, dollar quotes, parameters, an unterminated literal or
// comment), which makes the text not inert.
func tokens(text string) (out []token, ok bool) {
	for i := 0; i < len(text); {
		c := text[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f':
			i++
		case c == '-' && i+1 < len(text) && text[i+1] == '-':
			for i < len(text) && text[i] != '\n' {
				i++
			}
		case c == '/' && i+1 < len(text) && text[i+1] == '*':
			depth := 0
			for {
				if i+1 >= len(text) {
					return nil, false
				}
				if text[i] == '/' && text[i+1] == '*' {
					depth, i = depth+1, i+2
				} else if text[i] == '*' && text[i+1] == '/' {
					depth, i = depth-1, i+2
					if depth == 0 {
						break
					}
				} else {
					i++
				}
			}
		case c == '\'':
			end, ok := quoteEnd(text, i, false)
			if !ok {
				return nil, false
			}
			out, i = append(out, token{kind: tokString}), end
		case (c == 'e' || c == 'E') && i+1 < len(text) && text[i+1] == '\'':
			end, ok := quoteEnd(text, i+1, true)
			if !ok {
				return nil, false
			}
			out, i = append(out, token{kind: tokString}), end
		case c == '"' || c == '$':
			return nil, false
		case c >= '0' && c <= '9' || c == '.' && i+1 < len(text) && text[i+1] >= '0' && text[i+1] <= '9':
			j := i
			for j < len(text) && (text[j] >= '0' && text[j] <= '9' || text[j] == '.' || text[j] == '_' ||
				text[j] == 'e' || text[j] == 'E' || (text[j] == '+' || text[j] == '-') && (text[j-1] == 'e' || text[j-1] == 'E')) {
				j++
			}
			out, i = append(out, token{kind: tokNumber, s: text[i:j]}), j
		case c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z':
			j := i
			for j < len(text) && (text[j] == '_' || text[j] >= 'a' && text[j] <= 'z' || text[j] >= 'A' && text[j] <= 'Z' || text[j] >= '0' && text[j] <= '9') {
				j++
			}
			if j < len(text) && (text[j] == '$' || text[j] == '\'' || text[j] >= 0x80) {
				return nil, false // U&'…', B'…', X'…', N'…' literals and non-ASCII names: not read here
			}
			out, i = append(out, token{kind: tokWord, s: strings.ToLower(text[i:j])}), j
		case strings.IndexByte("()[],;", c) >= 0:
			out, i = append(out, token{kind: tokPunct, s: text[i : i+1]}), i+1
		case c == ':' && i+1 < len(text) && text[i+1] == ':':
			out, i = append(out, token{kind: tokPunct, s: "::"}), i+2
		case strings.IndexByte("+-*/<>=~!@#%^&|`?:.", c) >= 0:
			j := i
			for j < len(text) && strings.IndexByte("+-*/<>=~!@#%^&|`?", text[j]) >= 0 {
				if j+1 < len(text) && (text[j] == '-' && text[j+1] == '-' || text[j] == '/' && text[j+1] == '*') {
					break // a comment starts
				}
				j++
			}
			if j == i {
				j = i + 1 // ':' or '.'
			}
			out, i = append(out, token{kind: tokPunct, s: text[i:j]}), j
		default:
			return nil, false
		}
	}
	return out, true
}

// quoteEnd is the index after the literal whose opening quote is at text[open] (” inside is a quote;
// with backslashes, as in E'…', a backslash escapes the next byte).
func quoteEnd(text string, open int, backslashes bool) (int, bool) {
	for i := open + 1; i < len(text); i++ {
		switch {
		case backslashes && text[i] == '\\':
			i++
		case text[i] == '\'':
			if i+1 < len(text) && text[i+1] == '\'' {
				i++
				continue
			}
			return i + 1, true
		}
	}
	return 0, false
}
