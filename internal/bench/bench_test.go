package bench

import (
	"slices"
	"testing"
	"time"
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
