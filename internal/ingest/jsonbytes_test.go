package ingest

import (
	"encoding/json"
	"strings"
	"testing"
)

// FuzzValidJSONIsJSONValid: validJSON accepts exactly what json.Valid
// accepts. A value it wrongly accepted would be stored and its fields read
// from bytes that are not JSON; one it wrongly refused would be poison.
func FuzzValidJSONIsJSONValid(f *testing.F) {
	long := strings.Repeat("abcdefgh", 9)
	for _, v := range []string{
		``, ` `, `{}`, `[]`, ` { } `, `[ ]`, `{"a":1}`, `[1,2,3]`, `"a"`, `7`, `-0`, `-01`, `01`, `1.`, `1.5`, `.5`,
		`1e5`, `1E+5`, `1e-5`, `1e`, `1e+`, `-`, `+1`, `0x1`, `true`, `false`, `null`, `tru`, `nul`, `truex`,
		`[1,]`, `[,1]`, `[1 2]`, `{"a"}`, `{"a":}`, `{"a":1,}`, `{,}`, `{"a":1 "b":2}`, `{1:2}`, `{"a":1}}`,
		`[[]]`, `[{}]`, `{"a":[]}`, `[1]x`, `"\"`, `"\\"`, `"\\\""`, `"\u00e9"`, `"\u00zz"`, `"\u12"`, `"\x"`,
		`"\/\b\f\n\r\t"`, "\"\t\"", "\"\x00\"", "\"\x1f\"", "\"\x7f\xff\"", "\ufeff{}", `{"a":"x",}`,
		`"` + long + "\x01" + long + `"`, `"` + long + `\"` + long + `"`, `"` + long + `\q` + `"`, `"` + long,
		`"` + long + `\u0041` + long + `"`, `"` + long + `\u004` + `"`, `{"` + long + `":"` + long + `"}`,
		strings.Repeat("[", 10000) + strings.Repeat("]", 10000), strings.Repeat("[", 10001) + strings.Repeat("]", 10001),
		strings.Repeat("[", 9999) + "[]" + strings.Repeat("]", 9999), strings.Repeat("[", 10000) + "[]" + strings.Repeat("]", 10000),
		strings.Repeat(`{"a":`, 10000) + "1" + strings.Repeat("}", 10000), `["\\",` + strings.Repeat("[", 10001),
	} {
		f.Add([]byte(v))
	}
	f.Fuzz(func(t *testing.T, v []byte) {
		if got, want := validJSON(v), json.Valid(v); got != want {
			t.Fatalf("validJSON(%q) = %v, json.Valid %v", v, got, want)
		}
	})
}

// BenchmarkValidJSON against json.Valid, on values of the payload curve's
// shape (one long string) and of many small members:
// go test -run '^$' -bench ValidJSON ./internal/ingest
func BenchmarkValidJSON(b *testing.B) {
	var members strings.Builder
	members.WriteString(`{"items":[`)
	for i := range 200 {
		if i > 0 {
			members.WriteByte(',')
		}
		members.WriteString(`{"sku":"A-1029-XL","qty":3,"price":19.99,"tags":["red","sale"],"gift":false,"note":null}`)
	}
	members.WriteString(`]}`)
	for _, c := range []struct{ name, value string }{
		{"string_10KB", `{"id":"evt-0000000001","customer":"k1","amount":1,"note":"` + strings.Repeat("x", 10000) + `"}`},
		{"members_18KB", members.String()},
	} {
		v := []byte(c.value)
		for _, f := range []struct {
			name  string
			valid func([]byte) bool
		}{{"validJSON", validJSON}, {"json.Valid", json.Valid}} {
			b.Run(c.name+"/"+f.name, func(b *testing.B) {
				b.SetBytes(int64(len(v)))
				for b.Loop() {
					if !f.valid(v) {
						b.Fatal("not JSON")
					}
				}
			})
		}
	}
}
