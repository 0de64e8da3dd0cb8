package bench

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/internal/testenv"
)

// TestScaleCurvesReportEveryFigure runs every scale curve at small points
// against the real services, the processes curve with real child
// processes, and checks that each point reports its figures and each
// curve its spread.
func TestScaleCurvesReportEveryFigure(t *testing.T) {
	svc := testenv.Shared(t)
	exe := filepath.Join(t.TempDir(), "switchyard")
	if out, err := exec.Command("go", "build", "-o", exe, "../../cmd/switchyard").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	var out bytes.Buffer
	cfg := Config{DatabaseURL: svc.DatabaseURL, Brokers: svc.Brokers, Scale: true, PointJobs: 2000, Records: 2000,
		Concurrency: 8, SlowJob: 50 * time.Millisecond, Executable: exe, Out: &out}
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	e, err := setup(ctx, cfg)
	t.Cleanup(func() {
		if e != nil {
			if err := e.teardown(); err != nil {
				t.Error(err)
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	small := map[string][]int{"queues": {1, 4}, "lanes": {100, 1000}, "future": {0, 5000}, "leases": {4, 32},
		"payload": {200, 5000}, "processes": {1, 2}}
	for _, c := range scaleCurves {
		c.xs = small[c.name]
		if err := e.runCurve(ctx, c); err != nil {
			t.Fatalf("%s: %v\n%s", c.name, err, out.String())
		}
		for _, x := range c.xs {
			for _, metric := range c.flat {
				if v := e.results[scaleFigure(c.name, x, metric)]; v <= 0 {
					t.Errorf("%s = %v, want a positive figure", scaleFigure(c.name, x, metric), v)
				}
			}
		}
		for _, metric := range c.flat {
			if !strings.Contains(out.String(), "# scale "+c.name+" "+metric+": worst/first ") {
				t.Errorf("no spread noted for %s %s", c.name, metric)
			}
		}
	}
	if t.Failed() {
		t.Log(out.String())
	}
}

// TestFiguresRunAtSmallSizes runs every figure of `switchyard bench` at
// small sizes against the real services: each reports, and the run
// cleans up after itself.
func TestFiguresRunAtSmallSizes(t *testing.T) {
	svc := testenv.Shared(t)
	var out bytes.Buffer
	cfg := Config{DatabaseURL: svc.DatabaseURL, Brokers: svc.Brokers, Records: 2000, Jobs: 2000, HTTPJobs: 500,
		Keys: 100, History: 5000, Future: 5000, Concurrency: 8, Rate: 200, Duration: 2 * time.Second, Samples: 50, Out: &out}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := Run(ctx, cfg); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	for _, g := range groups {
		for _, f := range g.figures {
			switch f { // named after the sizes
			case historyFigure(10_000_000):
				f = historyFigure(cfg.History)
			case futureFigure(1_000_000):
				f = futureFigure(cfg.Future)
			}
			if !strings.Contains(out.String(), "\n"+f+" ") {
				t.Errorf("figure %s not reported", f)
			}
		}
	}
	// e2e splits each latency at the fetch the engine's client saw: every
	// record's, or its Kafka part would hold the loop's wait too.
	for _, want := range []string{"e2e: produce → in the consumer's hands (Kafka)", "e2e: the slowest 1 % ("} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("no line %q", want)
		}
	}
	if strings.Contains(out.String(), "without their fetch seen") {
		t.Error("e2e handled records whose fetch its hook did not see")
	}
	if t.Failed() {
		t.Log(out.String())
	}
}
