package studio

import (
	"encoding/json"
	"errors"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
)

// Every value comes from the server in PostgreSQL's text format (the simple protocol for console text,
// text result formats for the table routes), and this file turns that text into JSON, one rule per type:
//
//	NULL                                → null
//	boolean                             → true / false
//	smallint, integer, oid, real, double → a JSON number (NaN, Infinity, -Infinity as strings)
//	bigint, numeric                     → a string holding the exact digits (no client loses precision)
//	json, jsonb                         → the JSON value itself
//	bytea                               → a string in PostgreSQL's hex format, "\x0102…"
//	timestamptz                         → RFC 3339 in UTC, "2024-05-01T12:00:00.5Z"
//	timestamp                           → "2024-05-01T12:00:00.5" (no zone, as stored)
//	date, time, timetz, uuid, inet, …   → the server's text, a string
//	interval                            → ISO 8601, "P1Y2M3DT4H5M6.5S" (the session's IntervalStyle)
//	arrays of the types above           → JSON arrays (nested for several dimensions), elements as above
//	anything else (enums, ranges, composite types, geometric types, arrays of those) → the server's text
//
// The sessions the studio opens set TimeZone=UTC, DateStyle=ISO and IntervalStyle=iso_8601, so the text
// forms above are what the server sends; a query that changes them gets its own settings' text back.

// value is one JSON value for a column of type oid with the text src (nil for NULL).
func value(oid uint32, src []byte) json.RawMessage {
	if src == nil {
		return rawNull
	}
	if conv, ok := scalars[oid]; ok {
		return conv(src)
	}
	if elem, ok := arrayElems[oid]; ok {
		if v, err := arrayValue(elem, src); err == nil {
			return v
		}
	}
	return str(src)
}

var rawNull = json.RawMessage("null")

// scalars are the types with a rule of their own; every other type is its text as a string.
var scalars = map[uint32]func([]byte) json.RawMessage{
	pgtype.BoolOID:        boolValue,
	pgtype.Int2OID:        number,
	pgtype.Int4OID:        number,
	pgtype.OIDOID:         number,
	pgtype.Float4OID:      float,
	pgtype.Float8OID:      float,
	pgtype.Int8OID:        str,
	pgtype.NumericOID:     str,
	pgtype.JSONOID:        rawJSON,
	pgtype.JSONBOID:       rawJSON,
	pgtype.TimestamptzOID: timestamptz,
	pgtype.TimestampOID:   timestamp,
}

// arrayElems maps the array types of the scalar rules (and of text-like types) to their element type.
var arrayElems = map[uint32]uint32{
	pgtype.BoolArrayOID: pgtype.BoolOID, pgtype.Int2ArrayOID: pgtype.Int2OID, pgtype.Int4ArrayOID: pgtype.Int4OID,
	pgtype.Int8ArrayOID: pgtype.Int8OID, pgtype.OIDArrayOID: pgtype.OIDOID, pgtype.Float4ArrayOID: pgtype.Float4OID,
	pgtype.Float8ArrayOID: pgtype.Float8OID, pgtype.NumericArrayOID: pgtype.NumericOID, pgtype.JSONArrayOID: pgtype.JSONOID,
	pgtype.JSONBArrayOID: pgtype.JSONBOID, pgtype.TimestamptzArrayOID: pgtype.TimestamptzOID,
	pgtype.TimestampArrayOID: pgtype.TimestampOID, pgtype.TextArrayOID: pgtype.TextOID,
	pgtype.VarcharArrayOID: pgtype.VarcharOID, pgtype.BPCharArrayOID: pgtype.BPCharOID, pgtype.NameArrayOID: pgtype.NameOID,
	pgtype.UUIDArrayOID: pgtype.UUIDOID, pgtype.DateArrayOID: pgtype.DateOID, pgtype.TimeArrayOID: pgtype.TimeOID,
	pgtype.IntervalArrayOID: pgtype.IntervalOID, pgtype.ByteaArrayOID: pgtype.ByteaOID, pgtype.InetArrayOID: pgtype.InetOID,
	pgtype.CIDRArrayOID: pgtype.CIDROID,
}

// IsArray tells whether oid is an array type the studio turns into JSON arrays (the row routes turn a JSON
// array given for such a column into an array literal).
func IsArray(oid uint32) bool { _, ok := arrayElems[oid]; return ok }

func str(src []byte) json.RawMessage {
	b, _ := json.Marshal(string(src))
	return b
}

func boolValue(src []byte) json.RawMessage {
	switch string(src) {
	case "t", "true":
		return json.RawMessage("true")
	case "f", "false":
		return json.RawMessage("false")
	}
	return str(src)
}

// number is an integer's text, which is already a JSON number.
func number(src []byte) json.RawMessage {
	if _, err := strconv.ParseInt(string(src), 10, 64); err != nil {
		return str(src)
	}
	return json.RawMessage(append([]byte(nil), src...))
}

// float is a real or double precision: a JSON number unless NaN or an infinity.
func float(src []byte) json.RawMessage {
	f, err := strconv.ParseFloat(string(src), 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return str(src)
	}
	return json.RawMessage(append([]byte(nil), src...))
}

func rawJSON(src []byte) json.RawMessage {
	if !json.Valid(src) {
		return str(src)
	}
	return json.RawMessage(append([]byte(nil), src...))
}

// timestamptz turns "2024-05-01 12:00:00.5+00" (DateStyle ISO, TimeZone UTC) into RFC 3339 in UTC.
func timestamptz(src []byte) json.RawMessage {
	for _, layout := range []string{"2006-01-02 15:04:05.999999999-07", "2006-01-02 15:04:05.999999999-07:00", "2006-01-02 15:04:05.999999999-07:00:00"} {
		if t, err := time.Parse(layout, string(src)); err == nil {
			return str([]byte(t.UTC().Format(time.RFC3339Nano)))
		}
	}
	return str(src) // infinity, BC dates, another DateStyle
}

// timestamp turns "2024-05-01 12:00:00.5" into "2024-05-01T12:00:00.5".
func timestamp(src []byte) json.RawMessage {
	if t, err := time.Parse("2006-01-02 15:04:05.999999999", string(src)); err == nil {
		return str([]byte(t.Format("2006-01-02T15:04:05.999999999")))
	}
	return str(src)
}

// arrayValue parses an array's text ("{1,2,NULL}", "{{a,b},{c,d}}", "[0:1]={x,y}") into a JSON array whose
// elements follow the element type's rule.
func arrayValue(elem uint32, src []byte) (json.RawMessage, error) {
	s := string(src)
	if strings.HasPrefix(s, "[") { // explicit bounds: the elements are what follows "="
		i := strings.Index(s, "=")
		if i < 0 {
			return nil, errBadArray
		}
		s = s[i+1:]
	}
	p := &arrayParser{s: s, elem: elem, delim: ','}
	if elem == pgtype.BoxOID {
		p.delim = ';'
	}
	var b strings.Builder
	if err := p.array(&b); err != nil {
		return nil, err
	}
	if p.i != len(p.s) {
		return nil, errBadArray
	}
	return json.RawMessage(b.String()), nil
}

var errBadArray = errors.New("malformed array text")

type arrayParser struct {
	s     string
	i     int
	elem  uint32
	delim byte
}

func (p *arrayParser) array(b *strings.Builder) error {
	if p.i >= len(p.s) || p.s[p.i] != '{' {
		return errBadArray
	}
	p.i++
	b.WriteByte('[')
	if p.i < len(p.s) && p.s[p.i] == '}' {
		p.i++
		b.WriteByte(']')
		return nil
	}
	for first := true; ; first = false {
		if !first {
			b.WriteByte(',')
		}
		if p.i >= len(p.s) {
			return errBadArray
		}
		switch p.s[p.i] {
		case '{':
			if err := p.array(b); err != nil {
				return err
			}
		case '"':
			text, err := p.quoted()
			if err != nil {
				return err
			}
			b.Write(value(p.elem, []byte(text)))
		default:
			j := p.i
			for j < len(p.s) && p.s[j] != p.delim && p.s[j] != '}' {
				j++
			}
			text := p.s[p.i:j]
			p.i = j
			if text == "NULL" {
				b.Write(rawNull)
			} else {
				b.Write(value(p.elem, []byte(text)))
			}
		}
		if p.i >= len(p.s) {
			return errBadArray
		}
		switch p.s[p.i] {
		case p.delim:
			p.i++
		case '}':
			p.i++
			b.WriteByte(']')
			return nil
		default:
			return errBadArray
		}
	}
}

// quoted reads a double-quoted element, undoing its backslash escapes.
func (p *arrayParser) quoted() (string, error) {
	var out strings.Builder
	for p.i++; p.i < len(p.s); p.i++ {
		switch c := p.s[p.i]; c {
		case '\\':
			p.i++
			if p.i >= len(p.s) {
				return "", errBadArray
			}
			out.WriteByte(p.s[p.i])
		case '"':
			p.i++
			return out.String(), nil
		default:
			out.WriteByte(c)
		}
	}
	return "", errBadArray
}

// ArrayLiteral writes a JSON array (of strings, numbers, booleans, nulls, nested arrays or objects) as
// PostgreSQL's array text, for binding to an array column. Objects become their JSON text.
func ArrayLiteral(v []any) (string, error) {
	var b strings.Builder
	if err := arrayLiteral(&b, v); err != nil {
		return "", err
	}
	return b.String(), nil
}

func arrayLiteral(b *strings.Builder, v []any) error {
	b.WriteByte('{')
	for i, e := range v {
		if i > 0 {
			b.WriteByte(',')
		}
		switch e := e.(type) {
		case nil:
			b.WriteString("NULL")
		case []any:
			if err := arrayLiteral(b, e); err != nil {
				return err
			}
		default:
			text, err := Text(e)
			if err != nil {
				return err
			}
			b.WriteByte('"')
			b.WriteString(strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(text))
			b.WriteByte('"')
		}
	}
	b.WriteByte('}')
	return nil
}

// Text is a decoded JSON value (json.Number for numbers) as the text a parameter carries: strings as they
// are, numbers as written, booleans as true/false, objects and arrays as their JSON.
func Text(v any) (string, error) {
	switch v := v.(type) {
	case string:
		return v, nil
	case json.Number:
		return v.String(), nil
	case bool:
		return strconv.FormatBool(v), nil
	default:
		b, err := json.Marshal(v)
		return string(b), err
	}
}

var typeNames = pgtype.NewMap()

// TypeName is the name of a built-in type ("" for types only the server knows: enums, domains, …).
func TypeName(oid uint32) string {
	if t, ok := typeNames.TypeForOID(oid); ok {
		return t.Name
	}
	return ""
}
