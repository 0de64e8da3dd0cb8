package main

import (
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const run = `# switchyard bench: a context line
scale_queues_1_jobs_per_s 22329 jobs/s
scale_queues_1_claim_ms_p99 1.41 ms
scale_queues_10_jobs_per_s 20737 jobs/s
scale_queues_10_claim_ms_p99 1.52 ms
# scale queues jobs_per_s: max/min 1.08 (flat within 1.2: met)
scale_future_0_jobs_per_s 28378 jobs/s
scale_future_0_claim_ms_p99 1.12 ms
scale_future_1000000_jobs_per_s 27190 jobs/s
scale_future_1000000_claim_ms_p99 1.24 ms
scale_leases_64_jobs_per_s 57 jobs/s
scale_leases_64_efficiency 0.89 ratio
scale_leases_1000_jobs_per_s 866 jobs/s
scale_leases_1000_efficiency 0.87 ratio
`

func TestDrawsAPanelPerCurve(t *testing.T) {
	curves, err := parse(strings.NewReader(run))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, c := range curves {
		names = append(names, c.name)
	}
	if got := strings.Join(names, ","); got != "queues,future,leases" {
		t.Fatalf("curves %s, want queues,future,leases in the order read", got)
	}
	if p := curves[0].points["jobs_per_s"]; len(p) != 2 || p[1].x != 10 || p[1].value != 20737 {
		t.Fatalf("queues jobs_per_s = %v", p)
	}
	out := filepath.Join(t.TempDir(), "scale.png")
	if err := render(curves, out); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	if b := img.Bounds(); b.Dx() < 800 || b.Dy() < 500 {
		t.Fatalf("image is %v, want two rows of panels", b)
	}
}

func TestRefusesInputWithoutScaleFigures(t *testing.T) {
	if _, err := parse(strings.NewReader("work_jobs_per_s 1 jobs/s\n")); err == nil {
		t.Fatal("input with no scale figure was accepted")
	}
}
