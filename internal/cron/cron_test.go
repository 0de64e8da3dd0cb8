package cron

import (
	"strings"
	"testing"
	"time"
	"unicode"
)

func TestParse(t *testing.T) {
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
		_, err := Parse(c.in)
		switch {
		case c.err == "" && err != nil:
			t.Errorf("Parse(%q) = %v, want valid", c.in, err)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("Parse(%q) = %v, want %q", c.in, err, c.err)
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"0 2 * * *", "*/15 0-23/2 1,15,31 1-12 1-5", "5/15 * * * *", "1-2-3 * * * *"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if _, err := Parse(s); err != nil {
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

func TestCronNext(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	at := func(loc *time.Location, s string) time.Time {
		t.Helper()
		v, err := time.ParseInLocation("2006-01-02 15:04", s, loc)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	for _, c := range []struct {
		expr, after, want string
		loc               *time.Location
	}{
		{"* * * * *", "2026-11-30 10:00", "2026-11-30 10:01", time.UTC},
		{"0 2 * * *", "2026-11-30 10:00", "2026-12-01 02:00", time.UTC},
		{"*/15 * * * *", "2026-11-30 10:14", "2026-11-30 10:15", time.UTC},
		{"0 0 1 * *", "2026-12-15 00:00", "2027-01-01 00:00", time.UTC},
		{"0 9 * * 1-5", "2026-12-04 09:00", "2026-12-07 09:00", time.UTC}, // Friday → Monday
		{"0 0 13 * 5", "2026-11-30 00:00", "2026-12-04 00:00", time.UTC},  // day 13 OR a Friday
		{"0 0 * * 7", "2026-11-30 00:00", "2026-12-06 00:00", time.UTC},   // 7 is Sunday
		{"0 0 29 2 *", "2026-03-01 00:00", "2028-02-29 00:00", time.UTC},
		// 2027-03-28 02:30 does not exist in Berlin; 2027-10-31 02:30 happens twice.
		{"30 2 * * *", "2027-03-27 03:00", "2027-03-29 02:30", berlin},
		{"30 2 * * *", "2027-10-30 03:00", "2027-10-31 02:30", berlin},
	} {
		cr, err := Parse(c.expr)
		if err != nil {
			t.Fatal(err)
		}
		got := cr.Next(at(c.loc, c.after))
		if want := at(c.loc, c.want); !got.Equal(want) {
			t.Errorf("%q after %s (%s): %s, want %s", c.expr, c.after, c.loc, got, want)
		}
	}
	// The repeated 02:30 of 2027-10-31 (CEST, then CET) fires once.
	cr, _ := Parse("30 2 * * *")
	first := cr.Next(at(berlin, "2027-10-30 03:00"))
	if second := cr.Next(first); second.Sub(first) < 23*time.Hour {
		t.Errorf("after %s the next run is %s: the repeated hour fired twice", first, second)
	}
	if never, _ := Parse("0 0 30 2 *"); !never.Next(at(time.UTC, "2026-01-01 00:00")).IsZero() {
		t.Error("30 February found")
	}
}
