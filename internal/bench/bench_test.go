package bench

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-dev/switchyard/internal/metrics"
)

func TestSelectGroups(t *testing.T) {
	got, err := selectGroups([]string{"claim_ms_p99_at_0", "work", "ingest_records_per_s", "claim"})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, g := range got {
		names = append(names, g.name)
	}
	if want := []string{"ingest", "work", "claim"}; !slices.Equal(names, want) {
		t.Errorf("selectGroups = %v, want %v (canonical order, no repeats)", names, want)
	}
	if _, err := selectGroups([]string{"nope"}); err == nil {
		t.Error("an unknown name was accepted")
	}
	if all, _ := selectGroups(nil); len(all) != len(groups) {
		t.Errorf("no selection ran %d groups, want all %d", len(all), len(groups))
	}
}

func TestHistoryFigure(t *testing.T) {
	for n, want := range map[int]string{10_000_000: "claim_ms_p99_at_10m", 500_000: "claim_ms_p99_at_500k", 1234: "claim_ms_p99_at_1234"} {
		if got := historyFigure(n); got != want {
			t.Errorf("historyFigure(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestPercentile(t *testing.T) {
	var d []time.Duration
	for i := 1; i <= 100; i++ {
		d = append(d, time.Duration(i))
	}
	if p := percentile(d, 0.99); p != 99 {
		t.Errorf("p99 of 1..100 = %d, want 99", p)
	}
	if p := percentile(d, 0.5); p != 50 {
		t.Errorf("p50 of 1..100 = %d, want 50", p)
	}
	if p := percentile(nil, 0.99); p != 0 {
		t.Errorf("p99 of nothing = %d, want 0", p)
	}
}

func TestSlowestAveragesTheTailsParts(t *testing.T) {
	lat := []time.Duration{5, 40, 10, 30, 20}
	parts := []latencyParts{{5, 0, 0}, {10, 20, 10}, {10, 0, 0}, {0, 0, 30}, {20, 0, 0}}
	got := slowest(lat, parts, 0.4) // 40 and 30
	if want := (tailParts{n: 2, mean: latencyParts{5, 10, 20}}); got != want {
		t.Errorf("slowest 40 %% = %+v, want %+v", got, want)
	}
	if got := slowest(lat, parts, 0.01); got.n != 1 || got.mean != parts[1] {
		t.Errorf("slowest 1 %% of 5 = %+v, want the slowest record's parts %v", got, parts[1])
	}
}

func TestValidate(t *testing.T) {
	c := Config{DatabaseURL: "postgres://x", Brokers: []string{"b:9092"}, Records: -1}
	c.setDefaults()
	if err := c.Validate(); err == nil {
		t.Error("negative records accepted")
	}
	c = Config{Brokers: []string{"b:9092"}}
	c.setDefaults()
	if err := c.Validate(); err == nil {
		t.Error("a missing database was accepted")
	}
}

func TestRepeatedFiguresReportTheirMedians(t *testing.T) {
	var out strings.Builder
	e := &env{cfg: Config{Repeat: 3, Out: &out}, results: map[string]float64{},
		rounds: map[string][]float64{}, units: map[string]string{}}
	for e.round = 1; e.round <= 3; e.round++ {
		e.report("work_jobs_per_s", []float64{20, 10, 30}[e.round-1], "jobs/s")
		e.report("grouped_jobs_per_s", []float64{9, 18, 12}[e.round-1], "jobs/s")
	}
	e.reportMedians()
	if e.results["work_jobs_per_s"] != 20 || e.results["grouped_jobs_per_s"] != 12 {
		t.Errorf("medians = %v, want work 20 and grouped 12", e.results)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if want := "# round 2 of 3: work_jobs_per_s 10.00 jobs/s"; lines[2] != want {
		t.Errorf("line 3 = %q, want %q", lines[2], want)
	}
	if got := lines[len(lines)-2:]; got[0] != "work_jobs_per_s 20 jobs/s" || got[1] != "grouped_jobs_per_s 12 jobs/s" {
		t.Errorf("the figures' lines = %q, want the medians in the order first reported", got)
	}
	// Per round 0.45, 1.8 and 0.4: their median, not the medians' 0.6.
	out.Reset()
	e.summary()
	if want := "# grouped/work ratio 0.450 (target ≥ 0.8: MISSED, the median of the rounds' [0.450 1.800 0.400])"; !strings.Contains(out.String(), want) {
		t.Errorf("summary:\n%s\nwant the line %q", out.String(), want)
	}
}

// A burn-down's clock stops on the engine's own count of successes: the
// count is read from the metric the dispatcher writes, summed over
// kinds, and a dead job ends the wait with an error rather than a stall.
func TestSucceededReadsTheEnginesOutcomes(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := metrics.New(reg)
	m.DeclareKinds("a", "b")
	e := &env{registry: reg}
	m.JobAttempts.WithLabelValues("a", "succeeded").Add(2)
	m.JobAttempts.WithLabelValues("b", "succeeded").Add(1)
	m.JobAttempts.WithLabelValues("a", "retry").Add(5)
	if got, done, err := e.succeeded(4); got != 3 || done || err != nil {
		t.Errorf("succeeded(4) = %d, %v, %v; want 3, false, nil", got, done, err)
	}
	if got, done, err := e.succeeded(3); got != 3 || !done || err != nil {
		t.Errorf("succeeded(3) = %d, %v, %v; want 3, true, nil", got, done, err)
	}
	m.JobAttempts.WithLabelValues("b", "dead").Inc()
	if _, _, err := e.succeeded(3); err == nil || !strings.Contains(err.Error(), "1 jobs ended dead") {
		t.Errorf("a dead job: err = %v", err)
	}
}
