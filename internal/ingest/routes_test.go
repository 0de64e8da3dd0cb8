package ingest

import (
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/switchyard-dev/switchyard/config"
	"github.com/switchyard-dev/switchyard/internal/pgstore"
)

// A record becomes one job, or one poison entry, per route of its topic
// whose filter takes it, and a record no route takes is only counted.
func TestSeveralRoutesOfATopic(t *testing.T) {
	t.Parallel()
	byHeader := compile(t, config.Route{Name: "sync", Topic: "t", Kind: "sync",
		Filter: &config.Filter{FieldRef: config.FieldRef{Header: "event-type"}, In: []string{"created", "updated"}}})
	byField := compile(t, config.Route{Name: "refund", Topic: "t", Kind: "refund", Key: config.FieldRef{Field: "customer"},
		Filter: &config.Filter{FieldRef: config.FieldRef{Field: "type"}, In: []string{"cancelled", "42"}}})
	all := compile(t, config.Route{Name: "audit", Topic: "t", Kind: "audit"})
	rec := func(event, value string) *kgo.Record {
		r := &kgo.Record{Topic: "t", Offset: 7, Value: []byte(value)}
		if event != "" {
			r.Headers = []kgo.RecordHeader{{Key: "event-type", Value: []byte(event)}}
		}
		return r
	}
	for _, tc := range []struct {
		name   string
		rec    *kgo.Record
		routes []*Route
		jobs   []string // routes with a job, in order
		poison []string // routes with a poison entry
	}{
		{"header taken", rec("created", `{}`), []*Route{byHeader, byField}, []string{"sync"}, nil},
		{"field taken", rec("", `{"type":"cancelled","customer":"c1"}`), []*Route{byHeader, byField}, []string{"refund"}, nil},
		{"a number by its spelling", rec("", `{"type":42,"customer":"c1"}`), []*Route{byHeader, byField}, []string{"refund"}, nil},
		{"both take it", rec("updated", `{"type":"cancelled","customer":"c1"}`), []*Route{byHeader, byField}, []string{"sync", "refund"}, nil},
		{"taken, then poison for one route only", rec("created", `{"type":"cancelled"}`), []*Route{byHeader, byField},
			[]string{"sync"}, []string{"refund"}},
		{"no route takes it", rec("viewed", `{"type":"viewed"}`), []*Route{byHeader, byField}, nil, nil},
		{"a value not JSON is not taken by a field filter", rec("", `{"type":"cancelled"`), []*Route{byField}, nil, nil},
		{"a field that is an object is not taken", rec("", `{"type":{"x":1}}`), []*Route{byField}, nil, nil},
		{"a route without a filter takes all", rec("viewed", `x`), []*Route{byHeader, all}, []string{"audit"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b pgstore.IngestBatch
			n := decodeInto(&b, tc.routes, []*kgo.Record{tc.rec}, time.Now())
			var jobs, poison []string
			for _, j := range b.Jobs {
				jobs = append(jobs, j.Route)
				if j.DedupeKey != "t/0/7" {
					t.Errorf("route %s: dedupe key %q, want the record's position", j.Route, j.DedupeKey)
				}
			}
			for _, p := range b.Poison {
				poison = append(poison, p.Route)
			}
			if !slices.Equal(jobs, tc.jobs) || !slices.Equal(poison, tc.poison) {
				t.Fatalf("jobs of %v, poison of %v; want %v and %v", jobs, poison, tc.jobs, tc.poison)
			}
			filtered := 0
			if len(tc.jobs)+len(tc.poison) == 0 {
				filtered = 1
			}
			if n != (Decoded{Jobs: len(tc.jobs), Poison: len(tc.poison), Filtered: filtered}) {
				t.Fatalf("counted %+v", n)
			}
		})
	}
}
