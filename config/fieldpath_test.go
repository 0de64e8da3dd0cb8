package config

import (
	"reflect"
	"strings"
	"testing"
)

func TestParseFieldPath(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []string
		err  string
	}{
		{in: "customer_id", want: []string{"customer_id"}},
		{in: "customer.id", want: []string{"customer", "id"}},
		{in: "a/b.ключ.$x[0]", want: []string{"a/b", "ключ", "$x[0]"}},
		{in: "", err: "empty field path"},
		{in: "a..b", err: `"a..b" has an empty key`},
		{in: ".a", err: "empty key"},
		{in: "a.", err: "empty key"},
		{in: ".", err: "empty key"},
		{in: "a .b", err: "contains whitespace"},
		{in: "a\tb", err: "contains whitespace"},
		{in: "a\u00a0b", err: "contains whitespace"},
		{in: "a\xffb", err: "not valid UTF-8"},
	} {
		got, err := ParseFieldPath(c.in)
		switch {
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("ParseFieldPath(%q) error = %v, want %q", c.in, err, c.err)
		case c.err == "" && (err != nil || !reflect.DeepEqual(got, c.want)):
			t.Errorf("ParseFieldPath(%q) = %q, %v; want %q", c.in, got, err, c.want)
		}
	}
}

func FuzzParseFieldPath(f *testing.F) {
	for _, s := range []string{"customer.id", "a..b", " a", "a.b.c.d", "\xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		keys, err := ParseFieldPath(s)
		if err != nil {
			return
		}
		if strings.Join(keys, ".") != s {
			t.Fatalf("%q split into %q, which does not join back", s, keys)
		}
		for _, k := range keys {
			if k == "" {
				t.Fatalf("%q split into %q, with an empty key", s, keys)
			}
		}
	})
}
