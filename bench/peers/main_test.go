package main

import (
	"encoding/json"
	"os/exec"
	"testing"
)

// The figures of a system are read from its `name value unit` lines; a
// missing one is an error naming it, never a zero.
func TestFiguresReadsNamedLines(t *testing.T) {
	got, err := figures(exec.Command("printf", "# a note\nwork_jobs_per_s 123 jobs/s\nordered_jobs_per_s 45.5 jobs/s\n"),
		"work_jobs_per_s", "ordered_jobs_per_s")
	if err != nil || got["work_jobs_per_s"] != 123 || got["ordered_jobs_per_s"] != 45.5 {
		t.Fatalf("figures: %v %v", got, err)
	}
	if _, err := figures(exec.Command("printf", "work_jobs_per_s 1 jobs/s\n"), "river_jobs_per_s"); err == nil {
		t.Fatal("a missing figure was not an error")
	}
}

func TestMedian(t *testing.T) {
	for _, c := range []struct {
		in   []float64
		want float64
	}{{[]float64{3}, 3}, {[]float64{5, 1, 3}, 3}, {[]float64{4, 1, 3, 2}, 2.5}} {
		if got := median(c.in); got != c.want {
			t.Errorf("median(%v) = %v, want %v", c.in, got, c.want)
		}
	}
}

func TestValidateNamesTheBadFlag(t *testing.T) {
	c := config{databaseURL: "postgres://x", jobs: 1, concurrency: 1, maxConns: 2, rounds: 1}
	if err := c.validate("river,nope"); err == nil || err.Error() != `-only: "nope" is not one of switchyard, river, graphile` {
		t.Fatalf("validate: %v", err)
	}
	c.maxConns = 1
	if err := c.validate(""); err == nil || err.Error() != "-max-conns: 1 is below 2" {
		t.Fatalf("validate: %v", err)
	}
}

// A peer job's payload is as long as asked (for the six-digit ids of a
// 200,000-job run), and never padded below nothing.
func TestNotePadsThePayload(t *testing.T) {
	for _, size := range []int{180, 1000} {
		b, err := json.Marshal(noopArgs{N: 123456, Note: note(size)})
		if err != nil || len(b) != size {
			t.Errorf("payload of %d bytes asked: %d (%v)", size, len(b), err)
		}
	}
	if note(5) != "" {
		t.Error("a payload smaller than its skeleton got padding")
	}
}
