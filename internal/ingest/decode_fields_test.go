package ingest

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/switchyard-dev/switchyard/config"
)

// FuzzFieldsReadAsEncodingJSONDoes: reading a field from the bytes gives
// what decoding the whole value with encoding/json gave — the same text,
// or the same problem — for any value and path. Ingest read fields that
// way before, and every dedupe key it stored came from it: a difference
// would let a replayed record dodge its dedupe key.
func FuzzFieldsReadAsEncodingJSONDoes(f *testing.F) {
	for _, v := range []string{
		`{"a":"x"}`, `{"a":"x","a":"y"}`, `{"a":{"b":7}}`, `{"a":{"b":1e400}}`, `{"a":{"b":-0.10}}`,
		`{"a":null}`, `{"a":""}`, `{"a":true}`, `{"a":[1]}`, `{"a":{}}`, `["a"]`, `"a"`, `7`, ``, ` `,
		`{"a":"\ud800"}`, `{"a":"\ud83d\ude00"}`, `{"a":"\ufffd"}`, "{\"a\":\"\xff\"}", "{\"a\":\"\xef\xbf\xbd\"}",
		`{"a":"\u0000"}`, `{"\u0061":"esc"}`, `{"a":1} {"a":2}`, `{"a":1}x`, `{"a":01}`, `{"a":"x",}`,
		`{"a":{"b":"x"},"a":3}`, `{"a.b":"dot"}`, "{\"a\":\"\x00\"}", `{"a":"x\"y"}`, strings.Repeat("[", 10001), strings.Repeat("[", 10000) + strings.Repeat("]", 10000),
		strings.Repeat(`{"a":`, 10000) + "1" + strings.Repeat("}", 10000), `{"a":"[[[\"]]]"}`, `{"a":1e}`, `{"a":-}`, `{"a":1.}`,
		`{"a":.5}`, `{"a":+1}`, `{"a":0x1}`, `{"a":1E+2}`, `{"a":"\x"}`, `{"a":"\u12"}`, "{\"a\":\"\t\"}", `{"a" :1 }`, "\ufeff{}",
		// A string's end after escaped backslashes: the brackets after it
		// nest past the bound, and only an exact end tells.
		`{"a":"\\"}`, `{"a":"\\\"[["}`, `["\\",` + strings.Repeat("[", 10000) + strings.Repeat("]", 10001),
		`["\\\"",` + strings.Repeat("[", 10000) + strings.Repeat("]", 10001), `{"a":"x`,
		// lookup reads only the members' keys: values passed over, nested
		// or not, must not be mistaken for members, whatever they hold.
		` { "b" : { "a" : 1 } , "a" : [ {"a":2} ] , "c" : "\"a\":3" } `, `{"b":["a",{"a":{"b":1}}],"a":{"b":"y"}}`,
		`{"\u0061":{"b":1},"a\"":2}`, `{"a":{"b":1,"b":{"c":2}}}`, `{"a":true,"a":null}`, `{"a":{"b":1}}` + "\n",
	} {
		f.Add([]byte(v), "a")
		f.Add([]byte(v), "a.b")
	}
	f.Fuzz(func(t *testing.T, value []byte, field string) {
		s, err := fieldSource(field)
		if err != nil {
			return // not a field a config accepts
		}
		rec := &kgo.Record{Value: value}
		got, gotP := readField(rec, s)
		want, wantP := decodedField(value, s)
		if got != want || problemText(gotP) != problemText(wantP) {
			t.Fatalf("value %q field %q: read %q %s, decoded %q %s", value, field, got, problemText(gotP),
				want, problemText(wantP))
		}
	})
}

func fieldSource(field string) (source, error) {
	r, err := CompileRoute(config.Route{Topic: "t", Key: config.FieldRef{Field: field}})
	if err != nil {
		return source{}, err
	}
	return r.key, nil
}

// readField is decode's way: validJSON, then the field from the bytes.
func readField(rec *kgo.Record, s source) (string, *problem) {
	if !validJSON(rec.Value) {
		return "", problemf(ReasonDecode, partValue, "value is not JSON: %s", notJSON(rec.Value))
	}
	return s.text(rec, partKey)
}

// decodedField is the way before: the value decoded into a tree (but
// see the trailing data).
func decodedField(value []byte, s source) (string, *problem) {
	d := json.NewDecoder(bytes.NewReader(value))
	d.UseNumber()
	var doc any
	if err := d.Decode(&doc); err != nil {
		return "", problemf(ReasonDecode, partValue, "value is not JSON: %v", err)
	}
	// The one difference on purpose: the decoder's More is false before a
	// stray ']' or '}', so `{"a":"x"}]` used to pass as JSON. It is not.
	if len(bytes.TrimLeft(value[d.InputOffset():], " \t\r\n")) > 0 {
		return "", problemf(ReasonDecode, partValue, "value is not JSON: trailing data after the first value")
	}
	cur := doc
	for _, seg := range s.path {
		m, ok := cur.(map[string]any)
		if !ok {
			return "", problemf(ReasonMissingField, partKey, "%s: %s is missing", partKey, s.name)
		}
		if cur, ok = m[seg]; !ok {
			return "", problemf(ReasonMissingField, partKey, "%s: %s is missing", partKey, s.name)
		}
	}
	switch v := cur.(type) {
	case nil:
		return "", problemf(ReasonMissingField, partKey, "%s: %s is missing", partKey, s.name)
	case string:
		if v == "" {
			return "", problemf(ReasonMissingField, partKey, "%s: %s is empty", partKey, s.name)
		}
		if strings.ContainsRune(v, utf8.RuneError) && !decodedExact(value, s.path) {
			return "", problemf(ReasonDecode, partKey, "%s: %s is not valid UTF-8 text", partKey, s.name)
		}
		return v, nil
	case json.Number:
		return v.String(), nil
	case bool:
		if v {
			return "true", nil
		}
		return "false", nil
	case []any:
		return "", problemf(ReasonDecode, partKey, "%s: %s is an array, want a string or number", partKey, s.name)
	default:
		return "", problemf(ReasonDecode, partKey, "%s: %s is an object, want a string or number", partKey, s.name)
	}
}

// decodedExact finds the string's literal as encoding/json would (the
// last of repeated keys) and checks it as exactString does.
func decodedExact(value []byte, path []string) bool {
	raw := json.RawMessage(value)
	for _, seg := range path {
		var m map[string]json.RawMessage
		if json.Unmarshal(raw, &m) != nil {
			return false
		}
		var ok bool
		if raw, ok = m[seg]; !ok {
			return false
		}
	}
	return exactString(string(raw))
}

func problemText(p *problem) string {
	if p == nil {
		return "(no problem)"
	}
	return p.reason + ": " + p.msg
}
