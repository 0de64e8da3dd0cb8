package ingest

import (
	"bytes"
	"encoding/binary"

	"github.com/tidwall/gjson"
)

// A record's value is read as bytes: validJSON checks it once, and the
// fields a route names are found by walking members' keys (lookup). No
// document is built, which cost 5 to 7 times as much (bench --scale
// --only payload), and no value but the one found is parsed.

// maxNesting is encoding/json's bound on nesting, kept so that the same
// values are JSON as before.
const maxNesting = 10000

// validJSON reports whether v is one JSON value, as json.Valid does (any
// bytes but control characters in strings, nesting up to maxNesting), at
// several times its speed: a string's bytes are checked eight at a time
// between quotes and escapes found by IndexByte, where json.Valid (and
// gjson's validator before this one) looks at each byte. Open containers
// are a stack, not recursion, so that a record of brackets costs memory
// for its depth only. FuzzValidJSONIsJSONValid holds it to json.Valid.
func validJSON(v []byte) bool {
	var open []byte // '{' or '[' of each open container
	i := 0
	for {
		// A value starts at v[i], after white space.
		i = skipSpace(v, i)
		if i == len(v) {
			return false
		}
		ok := true
		switch c := v[i]; c {
		case '{', '[':
			if len(open) == maxNesting {
				return false
			}
			if j := skipSpace(v, i+1); j < len(v) && v[j] == c+2 { // '}' or ']'
				i = j + 1
				break
			}
			open = append(open, c)
			if i++; c == '{' {
				if i, ok = memberName(v, i); !ok {
					return false
				}
			}
			continue
		case '"':
			i, ok = validString(v, i)
		case 't':
			i, ok = word(v, i, "true")
		case 'f':
			i, ok = word(v, i, "false")
		case 'n':
			i, ok = word(v, i, "null")
		default:
			i, ok = validNumber(v, i)
		}
		if !ok {
			return false
		}
		// The value ends before v[i]: close the containers it ends, then
		// go on to the next value.
		for {
			i = skipSpace(v, i)
			if len(open) == 0 {
				return i == len(v)
			}
			if i == len(v) {
				return false
			}
			top := open[len(open)-1]
			if v[i] == ',' {
				if i++; top == '{' {
					if i, ok = memberName(v, i); !ok {
						return false
					}
				}
				break
			}
			if v[i] != top+2 {
				return false
			}
			open = open[:len(open)-1]
			i++
		}
	}
}

// memberName checks the name and colon of an object's member from v[i]
// on and returns the index after the colon.
func memberName(v []byte, i int) (int, bool) {
	i = skipSpace(v, i)
	if i == len(v) || v[i] != '"' {
		return i, false
	}
	i, ok := validString(v, i)
	if i = skipSpace(v, i); !ok || i == len(v) || v[i] != ':' {
		return i, false
	}
	return i + 1, true
}

// validString checks the string whose opening quote is v[i] and returns
// the index after its closing quote. Each byte is looked at a bounded
// number of times, however many escapes the string holds.
func validString(v []byte, i int) (int, bool) {
	i++
	for {
		q := bytes.IndexByte(v[i:], '"')
		if q < 0 {
			return len(v), false
		}
		q += i
		for i < q { // v[i:q] holds no quote
			e := bytes.IndexByte(v[i:q], '\\')
			if e < 0 {
				if !noControl(v[i:q]) {
					return q, false
				}
				i = q
				break
			}
			e += i
			n := escapeLen(v, e)
			if n == 0 || !noControl(v[i:e]) {
				return e, false
			}
			i = e + n // past q when the escape is \" and q its quote
		}
		if i == q {
			return q + 1, true
		}
	}
}

// escapeLen is the length of the escape that starts at v[e], a backslash,
// or 0 if JSON has no such escape.
func escapeLen(v []byte, e int) int {
	if e+1 == len(v) {
		return 0
	}
	switch v[e+1] {
	case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
		return 2
	case 'u':
		if e+6 > len(v) {
			return 0
		}
		for _, c := range v[e+2 : e+6] {
			if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
				return 0
			}
		}
		return 6
	}
	return 0
}

// noControl reports whether s holds no byte under 0x20, eight bytes at a
// time: (x - 0x20 in each byte) &^ x has a byte's high bit set for some
// byte exactly when some byte of x is under 0x20.
func noControl(s []byte) bool {
	const under, high = 0x2020202020202020, 0x8080808080808080
	for ; len(s) >= 8; s = s[8:] {
		if x := binary.LittleEndian.Uint64(s); (x-under)&^x&high != 0 {
			return false
		}
	}
	for _, c := range s {
		if c < 0x20 {
			return false
		}
	}
	return true
}

// validNumber checks the number that starts at v[i] and returns the index
// after it: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func validNumber(v []byte, i int) (int, bool) {
	if i < len(v) && v[i] == '-' {
		i++
	}
	switch {
	case i < len(v) && v[i] == '0':
		i++
	case i < len(v) && '1' <= v[i] && v[i] <= '9':
		i = digits(v, i+1)
	default:
		return i, false
	}
	if i < len(v) && v[i] == '.' {
		j := digits(v, i+1)
		if j == i+1 {
			return j, false
		}
		i = j
	}
	if i < len(v) && (v[i] == 'e' || v[i] == 'E') {
		if i++; i < len(v) && (v[i] == '+' || v[i] == '-') {
			i++
		}
		j := digits(v, i)
		if j == i {
			return j, false
		}
		i = j
	}
	return i, true
}

func digits(v []byte, i int) int {
	for i < len(v) && '0' <= v[i] && v[i] <= '9' {
		i++
	}
	return i
}

// word checks that the literal w starts at v[i].
func word(v []byte, i int, w string) (int, bool) {
	if !bytes.HasPrefix(v[i:], []byte(w)) {
		return i, false
	}
	return i + len(w), true
}

// lookup walks a dotted path through the JSON objects of value, a value
// validJSON accepted. Where an object repeats a key the last one counts,
// as in encoding/json (and so in every dedupe key ingest ever stored).
// Only the members' keys are read on the way, the other values skipped by
// their quotes and brackets, and only the value found is parsed: parsing
// the whole object for each field (gjson's ForEach over a copy of the
// value) was half of decoding a 10-100 KB record.
func lookup(value []byte, path []string) (gjson.Result, bool) {
	for _, seg := range path {
		v, ok := member(value, seg)
		if !ok {
			return gjson.Result{}, false
		}
		value = v
	}
	return gjson.ParseBytes(value), true
}

// member is the raw value of the last member named name of the JSON
// object that v holds, or false if v holds no object or the object no
// such member.
func member(v []byte, name string) ([]byte, bool) {
	i := skipSpace(v, 0)
	if i == len(v) || v[i] != '{' {
		return nil, false
	}
	var found []byte
	ok := false
	for i = skipSpace(v, i+1); i < len(v) && v[i] == '"'; {
		end := stringEnd(v, i)
		if end == len(v) {
			return nil, false
		}
		key := v[i : end+1]
		i = skipSpace(v, end+1)
		if i == len(v) || v[i] != ':' {
			return nil, false
		}
		start := skipSpace(v, i+1)
		stop := valueEnd(v, start)
		if keyIs(key, name) {
			found, ok = v[start:stop], true
		}
		if i = skipSpace(v, stop); i < len(v) && v[i] == ',' {
			i = skipSpace(v, i+1)
		}
	}
	return found, ok
}

// keyIs reports whether the quoted JSON string key reads as name; only a
// key with escapes is decoded to tell.
func keyIs(key []byte, name string) bool {
	if bytes.IndexByte(key, '\\') < 0 {
		return string(key[1:len(key)-1]) == name
	}
	return gjson.ParseBytes(key).Str == name
}

// valueEnd is the index just past the JSON value that starts at v[i].
func valueEnd(v []byte, i int) int {
	if i == len(v) {
		return i
	}
	switch v[i] {
	case '"':
		return min(stringEnd(v, i)+1, len(v))
	case '{', '[':
		depth := 0
		for ; i < len(v); i++ {
			switch v[i] {
			case '"':
				i = stringEnd(v, i)
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return i + 1
				}
			}
		}
		return len(v)
	}
	for ; i < len(v); i++ { // a number, true, false or null
		switch v[i] {
		case ',', '}', ']', ' ', '\t', '\r', '\n':
			return i
		}
	}
	return i
}

// skipSpace is the index of the first byte from v[i] on that is not JSON
// white space.
func skipSpace(v []byte, i int) int {
	for i < len(v) && (v[i] == ' ' || v[i] == '\t' || v[i] == '\r' || v[i] == '\n') {
		i++
	}
	return i
}

// stringEnd is the index of the quote that closes the string opened at
// v[open], or len(v) if none does: the next quote after an even number
// of backslashes. Found by IndexByte rather than byte by byte, it skips
// a large value's long strings at memchr's speed; the byte loop was a
// sixth of decoding 10-100 KB records (bench --scale --only payload
// --cpuprofile).
func stringEnd(v []byte, open int) int {
	for i := open + 1; ; i++ {
		j := bytes.IndexByte(v[i:], '"')
		if j < 0 {
			return len(v)
		}
		i += j
		escapes := 0
		for k := i - 1; v[k] == '\\'; k-- {
			escapes++
		}
		if escapes%2 == 0 {
			return i
		}
	}
}
