package metrics

import (
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// specMetrics is SPEC §7, v2 included: the names, types and label sets
// that dashboards, alerts and users' queries rely on.
var specMetrics = map[string]struct {
	typ    string
	labels []string
}{
	"switchyard_queue_oldest_runnable_age_seconds": {"gauge", []string{"queue"}},
	"switchyard_queue_oldest_waiting_age_seconds":  {"gauge", []string{"queue"}},
	"switchyard_queue_wait_seconds":                {"histogram", []string{"queue", "kind"}},
	"switchyard_job_latency_seconds":               {"histogram", []string{"queue", "kind"}},
	"switchyard_queue_jobs":                        {"gauge", []string{"queue", "state"}},
	"switchyard_job_duration_seconds":              {"histogram", []string{"kind", "outcome"}},
	"switchyard_job_attempts_total":                {"counter", []string{"kind", "outcome"}},
	"switchyard_dlq_entries":                       {"gauge", []string{"queue", "reason"}},
	"switchyard_lanes_blocked":                     {"gauge", []string{"route"}},
	"switchyard_ingest_records_total":              {"counter", []string{"topic", "outcome"}},
	"switchyard_kafka_lag_records":                 {"gauge", []string{"topic", "partition"}},
	"switchyard_kafka_lag_seconds":                 {"gauge", []string{"topic"}},
	"switchyard_ingest_paused":                     {"gauge", []string{"route", "cause"}},
	"switchyard_ingest_errors_total":               {"counter", []string{"topic"}},
	"switchyard_flow_throttled_total":              {"counter", []string{"route", "limit"}},
}

// Every metric of SPEC §7 is registered by New under its name, with its
// type and exactly its labels (a label added or renamed breaks every
// query that aggregates by them), and the outcome label of
// switchyard_job_attempts_total takes each value the contract lists.
func TestMetricsMatchTheContract(t *testing.T) {
	t.Parallel()
	var reg capture
	New(&reg)
	type shape struct {
		typ    string
		labels []string
	}
	got := map[string]shape{}
	fq := regexp.MustCompile(`fqName: "([a-z_]+)"`)
	vl := regexp.MustCompile(`variableLabels: \{([a-z_,]*)\}`)
	for _, c := range reg.cs {
		var typ string
		switch c.(type) {
		case *prometheus.GaugeVec, prometheus.Gauge:
			typ = "gauge"
		case *prometheus.CounterVec, prometheus.Counter:
			typ = "counter"
		case *prometheus.HistogramVec, prometheus.Histogram:
			typ = "histogram"
		default:
			typ = "other"
		}
		ch := make(chan *prometheus.Desc, 16)
		go func() { c.Describe(ch); close(ch) }()
		for d := range ch {
			name, labels := fq.FindStringSubmatch(d.String()), vl.FindStringSubmatch(d.String())
			if name == nil || labels == nil {
				t.Fatalf("cannot read the name and labels of %s", d)
			}
			s := shape{typ: typ}
			if labels[1] != "" {
				s.labels = strings.Split(labels[1], ",")
			}
			got[name[1]] = s
		}
	}
	for name, want := range specMetrics {
		g, ok := got[name]
		switch {
		case !ok:
			t.Errorf("%s is not registered", name)
		case g.typ != want.typ:
			t.Errorf("%s is a %s, want a %s", name, g.typ, want.typ)
		case !slices.Equal(sorted(g.labels), sorted(want.labels)):
			t.Errorf("%s has labels %v, want %v", name, g.labels, want.labels)
		}
	}
	for _, o := range []string{"succeeded", "retry", "dead", "skipped", "lease_lost", "coalesced", "cancelled", "expired"} {
		if !slices.Contains(Outcomes, o) {
			t.Errorf("switchyard_job_attempts_total: outcome %q is not among the declared outcomes %v", o, Outcomes)
		}
	}
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}
