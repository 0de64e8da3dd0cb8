package main

import (
	"testing"
	"time"
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
