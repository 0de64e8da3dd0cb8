package ingest

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/switchyard-dev/switchyard/config"
)

// A route's run_at or delay sets when a record's job may run first; a
// time not ahead runs now (RunAt nil); what parses as neither RFC 3339
// nor Unix milliseconds is poison (decode); ttl counts from the run time.
func TestRunTime(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	ahead := now.Add(90 * time.Minute)
	runAt := config.Route{RunAt: config.FieldRef{Field: "send_at"}, TTL: config.Duration(time.Hour)}
	for _, tc := range []struct {
		name   string
		route  config.Route
		rec    kgo.Record
		want   *time.Time // nil: at once
		errHas string     // poison decode when set
	}{
		{name: "rfc3339 ahead", route: runAt, rec: kgo.Record{Value: []byte(`{"send_at":"2026-12-01T13:30:00Z"}`)}, want: &ahead},
		{name: "rfc3339 with an offset", route: runAt,
			rec: kgo.Record{Value: []byte(`{"send_at":"2026-12-01T14:30:00+01:00"}`)}, want: &ahead},
		{name: "unix milliseconds", route: runAt,
			rec: kgo.Record{Value: fmtMS(ahead)}, want: &ahead},
		{name: "past runs now", route: runAt, rec: kgo.Record{Value: []byte(`{"send_at":"2020-01-01T00:00:00Z"}`)}},
		{name: "missing runs now", route: runAt, rec: kgo.Record{Value: []byte(`{}`)}},
		{name: "null runs now", route: runAt, rec: kgo.Record{Value: []byte(`{"send_at":null}`)}},
		{name: "header", route: config.Route{RunAt: config.FieldRef{Header: "run-at"}},
			rec:  kgo.Record{Value: []byte("x"), Headers: []kgo.RecordHeader{{Key: "run-at", Value: []byte("2026-12-01T13:30:00Z")}}},
			want: &ahead},
		{name: "unparseable", route: runAt, rec: kgo.Record{Value: []byte(`{"send_at":"tomorrow"}`)},
			errHas: `run_at: "tomorrow" is neither an RFC 3339 time nor integer Unix milliseconds`},
		{name: "unix seconds", route: runAt, rec: kgo.Record{Value: fmt.Appendf(nil, `{"send_at":%d}`, ahead.Unix())},
			errHas: fmt.Sprintf("run_at: %d is not Unix milliseconds of a time since 1973: give milliseconds (%d000 if it is seconds)", ahead.Unix(), ahead.Unix())},
		{name: "negative", route: runAt, rec: kgo.Record{Value: []byte(`{"send_at":-1}`)}, errHas: "-1 is not Unix milliseconds"},
		{name: "zero runs now", route: runAt, rec: kgo.Record{Value: []byte(`{"send_at":0}`)}},
		{name: "an object", route: runAt, rec: kgo.Record{Value: []byte(`{"send_at":{}}`)}, errHas: "run_at"},
		{name: "too far", route: runAt, rec: kgo.Record{Value: []byte(`{"send_at":9223372036854775807}`)},
			errHas: "more than 100 years away"},
		{name: "delay from the record's timestamp", route: config.Route{Delay: config.Duration(time.Hour)},
			rec: kgo.Record{Value: []byte("x"), Timestamp: now.Add(30 * time.Minute)}, want: &ahead},
		{name: "delay already past", route: config.Route{Delay: config.Duration(time.Minute)},
			rec: kgo.Record{Value: []byte("x"), Timestamp: now.Add(-time.Hour)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.route.Topic, tc.route.Kind, tc.route.Queue = "t", "k", "q"
			r := compile(t, tc.route)
			rec := tc.rec
			j, p := r.decode(&rec, now, given{})
			if tc.errHas != "" {
				if p == nil || p.reason != ReasonDecode || !strings.Contains(p.msg, tc.errHas) {
					t.Fatalf("got job %+v, problem %+v; want decode poison with %q", j, p, tc.errHas)
				}
				return
			}
			if p != nil {
				t.Fatalf("poison %+v", p)
			}
			switch {
			case tc.want == nil && j.RunAt != nil:
				t.Fatalf("RunAt %v, want at once", j.RunAt)
			case tc.want != nil && (j.RunAt == nil || !j.RunAt.Equal(*tc.want)):
				t.Fatalf("RunAt %v, want %v", j.RunAt, tc.want)
			case tc.want != nil && tc.route.TTL > 0 && !j.Deadline.Equal(tc.want.Add(tc.route.TTL.D())):
				t.Fatalf("deadline %v, want ttl after the run time %v", j.Deadline, tc.want)
			}
		})
	}
}

func fmtMS(at time.Time) []byte {
	return []byte(`{"send_at":` + strconv.FormatInt(at.UnixMilli(), 10) + `}`)
}

// The API's Switchyard-Run-At and Switchyard-Delay: one of them, each
// with a clear error naming the header.
func TestRequestRunAt(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		runAt, delay string
		want         time.Duration // from now; -1: no run time
		errHas       string
	}{
		{want: -1},
		{runAt: "2026-12-01T12:00:30Z", want: 30 * time.Second},
		{delay: "90", want: 90 * time.Second},
		{delay: "1.5", want: 1500 * time.Millisecond},
		{delay: "72h", want: 72 * time.Hour},
		{delay: "-5s", errHas: "Switchyard-Delay: \"-5s\" is negative"},
		{delay: "NaN", errHas: "Switchyard-Delay: \"NaN\" is neither seconds nor a duration"},
		{delay: "soon", errHas: "Switchyard-Delay: \"soon\" is neither"},
		{delay: "1e30", errHas: "more than 100 years"},
		{runAt: "noon", errHas: "Switchyard-Run-At: \"noon\" is neither"},
		{runAt: "1796000000", errHas: "Switchyard-Run-At: 1796000000 is not Unix milliseconds of a time since 1973"},
		{runAt: strconv.FormatInt(now.Add(time.Minute).UnixMilli(), 10), want: time.Minute},
		{runAt: "2026-12-01T12:00:30Z", delay: "5", errHas: "not both"},
	} {
		at, err := requestRunAt(EnqueueRequest{RunAt: tc.runAt, Delay: tc.delay}, now)
		switch {
		case tc.errHas != "":
			if err == nil || !strings.Contains(err.Error(), tc.errHas) {
				t.Errorf("run-at %q delay %q: %v, want an error with %q", tc.runAt, tc.delay, err, tc.errHas)
			}
		case err != nil:
			t.Errorf("run-at %q delay %q: %v", tc.runAt, tc.delay, err)
		case tc.want < 0 && at != nil, tc.want >= 0 && (at == nil || !at.Equal(now.Add(tc.want))):
			t.Errorf("run-at %q delay %q: %v, want now + %s", tc.runAt, tc.delay, at, tc.want)
		}
	}
}
