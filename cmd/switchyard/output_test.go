package main

import (
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
)

func TestNearest(t *testing.T) {
	t.Parallel()
	verbs := []string{"migrate", "run", "dev", "produce", "jobs", "dlq", "queues", "routes", "replay", "bench", "version"}
	for got, want := range map[string]string{
		"josb": "jobs", "job": "jobs", "qeueus": "queues", "replya": "replay", "migrat": "migrate",
		"dql": "dlq", "rnu": "run", "versoin": "version", "frobnicate": "", "x": "", "": "", "ver": "version",
	} {
		if s := nearest(got, verbs); s != want {
			t.Errorf("nearest(%q) = %q, want %q", got, s, want)
		}
	}
}

func TestAgo(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	for d, want := range map[time.Duration]string{
		0: "just now", -12 * time.Second: "12s ago", -3 * time.Minute: "3m ago", 119 * time.Minute: "in 2h",
		-30 * time.Hour: "30h ago", 3 * 24 * time.Hour: "in 3d", 59*time.Minute + 50*time.Second: "in 1h",
	} {
		if s := ago(now, now.Add(d)); s != want {
			t.Errorf("ago(%s) = %q, want %q", d, s, want)
		}
	}
}

func TestVersionString(t *testing.T) {
	t.Parallel()
	v := buildVersion{Version: "v1.2.0", Revision: "397ccb0abc", Time: "2026-11-30T08:00:00Z", Modified: true, Go: "go1.26.8"}
	if s, want := v.String(), "switchyard v1.2.0 (revision 397ccb0abc of 2026-11-30T08:00:00Z, with uncommitted changes) go1.26.8"; s != want {
		t.Errorf("%q, want %q", s, want)
	}
	if s, want := (buildVersion{Version: "(devel)", Go: "go1.26.8"}).String(), "switchyard (devel) go1.26.8"; s != want {
		t.Errorf("%q, want %q", s, want)
	}
}

// A table's columns line up on a terminal whatever its keys hold: a
// Chinese character takes two cells, a combining accent none, and the
// column after starts at the same cell on every line.
func TestTableAlignsWideCharacters(t *testing.T) {
	keys := map[string]int{"c-1": 3, "客户-1": 6, "cafe\u0301": 4, "ｆｕｌｌ": 8} // and the cells each takes
	var b strings.Builder
	tw := newTable(&b, "KEY", "STATE")
	for k, n := range keys {
		if got := cells(k); got != n {
			t.Errorf("%q takes %d cells, want %d", k, got, n)
		}
		row(tw, k, "queued")
	}
	if err := tw.Flush(); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	for _, l := range lines {
		at := strings.LastIndex(l, "  ") + 2
		if got := cells(l[:at]); got != 10 {
			t.Errorf("%q: its second column starts at cell %d, want 10 (the widest key, ｆｕｌｌ, takes 8 cells, and two spaces)", l, got)
		}
	}
	if lines[0] != "KEY       STATE" {
		t.Errorf("the header reads %q", lines[0])
	}
}

// clip cuts to the cells a terminal gives the text, as the table
// measures it: six Chinese characters are twelve cells, not six.
func TestClipCountsCells(t *testing.T) {
	for _, c := range []struct {
		in   string
		n    int
		want string
	}{
		{"abcdef", 4, "abc…"},
		{"ab", 4, "ab"},
		{"客户客户客户", 5, "客户…"},
		{"客户客户客户", 12, "客户客户客户"},
		{"cafe\u0301s", 5, "cafe\u0301s"}, // the accent combines: five cells
	} {
		if got := clip(c.in, c.n); got != c.want || cells(got) > c.n {
			t.Errorf("clip(%q, %d) = %q (%d cells), want %q", c.in, c.n, got, cells(got), c.want)
		}
	}
}

// run's JSON log writes a duration with its unit: a bare "grace":5 left
// the reader to know that zap counts seconds.
func TestLogDurationsHaveUnits(t *testing.T) {
	var b strings.Builder
	log, err := newLogger(&b)
	if err != nil {
		t.Fatal(err)
	}
	log.Warn("grace period over", zap.Duration("grace", 5*time.Second), zap.Duration("backoff", 100*time.Millisecond))
	if got := b.String(); !strings.Contains(got, `"grace":"5s"`) || !strings.Contains(got, `"backoff":"100ms"`) {
		t.Errorf("log line %s, want the durations as 5s and 100ms", got)
	}
}
