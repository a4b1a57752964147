package appliance

import (
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// checkDisplayText applies the rules of every display field (names, labels, notes, device names): valid
// UTF-8, no control characters (NUL, newline, tab …), and a length between min and max counted in
// characters, not bytes.
func checkDisplayText(field, v string, min, max int) error {
	if !utf8.ValidString(v) {
		return Invalid("%s must be valid UTF-8", field)
	}
	for _, r := range v {
		if unicode.IsControl(r) || r == '\u2028' || r == '\u2029' {
			return Invalid("%s must not contain control characters (such as NUL or newline)", field)
		}
	}
	if n := utf8.RuneCountInString(v); n < min || n > max {
		if min == 0 {
			return Invalid("%s must be at most %d characters", field, max)
		}
		return Invalid("%s must be %d to %d characters", field, min, max)
	}
	return nil
}

// foldLatin spells a letter without its accents or ligatures (é → e, ß → ss, Æ → AE); other runes are
// returned as they are.
func foldLatin(s string) string {
	var b strings.Builder
	for _, r := range norm.NFKD.String(s) {
		if unicode.Is(unicode.Mn, r) { // a combining accent the decomposition split off
			continue
		}
		if f, ok := latinFolds[r]; ok {
			b.WriteString(f)
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// latinFolds are the Latin letters that do not decompose into a base letter and accents.
var latinFolds = map[rune]string{
	'ß': "ss", 'æ': "ae", 'Æ': "AE", 'œ': "oe", 'Œ': "OE", 'ø': "o", 'Ø': "O", 'đ': "d", 'Đ': "D",
	'ð': "d", 'Ð': "D", 'þ': "th", 'Þ': "TH", 'ł': "l", 'Ł': "L", 'ı': "i", 'ħ': "h", 'Ħ': "H",
}

// slugify turns a display name into a URL slug: Latin letters lose their accents, other letters and
// digits are kept (lowercase), everything else becomes a dash; at most 40 characters.
func slugify(name string) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(foldLatin(name)) {
		if unicode.IsLetter(r) || unicode.IsDigit(r) {
			if dash && b.Len() > 0 {
				b.WriteByte('-')
			}
			b.WriteRune(r)
			dash = false
			continue
		}
		dash = true
	}
	s := b.String()
	if s == "" {
		s = "project"
	}
	if r := []rune(s); len(r) > 40 {
		s = strings.TrimRight(string(r[:40]), "-")
	}
	return s
}
