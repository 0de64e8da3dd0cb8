package config

import (
	"strings"
	"testing"
	"unicode"
)

func TestParseCron(t *testing.T) {
	for _, c := range []struct {
		in  string
		err string // "" = valid
	}{
		{in: "* * * * *"},
		{in: "0 2 * * *"},
		{in: "*/15 0-23/2 1,15,31 1-12 1-5"},
		{in: "59 23 31 12 7"},
		{in: "  0\t0  1 1 0 "},
		{in: "0 0 * *", err: `"0 0 * *" has 4 fields, want 5`},
		{in: "0 0 * * * *", err: "has 6 fields"},
		{in: "", err: "has 0 fields"},
		{in: "@daily", err: "has 1 fields"},
		{in: "60 * * * *", err: `minute field "60": 60 is out of range 0-59`},
		{in: "* 24 * * *", err: `hour field "24": 24 is out of range 0-23`},
		{in: "* * 0 * *", err: `day-of-month field "0": 0 is out of range 1-31`},
		{in: "* * * 13 *", err: `month field "13": 13 is out of range 1-12`},
		{in: "* * * * 8", err: `day-of-week field "8": 8 is out of range 0-7`},
		{in: "* * * JAN *", err: `month field "JAN": "JAN" is not a number`},
		{in: "+5 * * * *", err: `"+5" is not a number`},
		{in: "5-1 * * * *", err: `range "5-1" runs backwards`},
		{in: "*/0 * * * *", err: `step "0" must be a number of at least 1`},
		{in: "*/ * * * *", err: `step "" must be`},
		{in: "5/15 * * * *", err: "a step needs * or a range, e.g. 5-59/15"},
		{in: "1,,2 * * * *", err: "empty item in a list"},
		{in: "1-2-3 * * * *", err: `"2-3" is not a number`},
		{in: "*-5 * * * *", err: `"*" is not a number`},
		{in: "99999999999999999999 * * * *", err: "is not a number"},
	} {
		err := ParseCron(c.in)
		switch {
		case c.err == "" && err != nil:
			t.Errorf("ParseCron(%q) = %v, want valid", c.in, err)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("ParseCron(%q) = %v, want %q", c.in, err, c.err)
		}
	}
}

func FuzzParseCron(f *testing.F) {
	for _, s := range []string{"0 2 * * *", "*/15 0-23/2 1,15,31 1-12 1-5", "5/15 * * * *", "1-2-3 * * * *"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if ParseCron(s) != nil {
			return
		}
		if n := len(strings.Fields(s)); n != 5 {
			t.Fatalf("accepted %q, which has %d fields", s, n)
		}
		if i := strings.IndexFunc(s, func(r rune) bool {
			return !unicode.IsSpace(r) && !strings.ContainsRune("0123456789*,-/", r)
		}); i >= 0 {
			t.Fatalf("accepted %q, with %q outside the syntax", s, s[i:])
		}
	})
}
