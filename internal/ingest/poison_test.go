package ingest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/switchyard-dev/switchyard/config"
	"github.com/switchyard-dev/switchyard/internal/pgstore"
	"github.com/switchyard-dev/switchyard/internal/testenv"
)

// defaulted compiles a route of kind k on queue q with every setting
// it leaves out at its config default.
func defaulted(t testing.TB, r config.Route) *Route {
	t.Helper()
	r.Kind, r.Queue = "k", "q"
	cfg := config.Config{Routes: []config.Route{r}}
	cfg.SetDefaults()
	cr, err := CompileRoute(cfg.Routes[0])
	if err != nil {
		t.Fatal(err)
	}
	return cr
}

// I6 against the real broker: records whose key or dedupe value is
// long, or not UTF-8, or spelled so that encoding/json would rewrite it,
// are parked, and every partition of every topic moves on to its end.
// Before, one 9,000-character key failed every ingest transaction of the
// process for good: the other topics' records stopped too.
func TestAnyRecordMovesItsPartitionOn(t *testing.T) {
	t.Parallel()
	store := testenv.MigratedStore(t)
	byKey, byField, plain := testenv.Topic(t, 1), testenv.Topic(t, 1), testenv.Topic(t, 2)
	routes := []*Route{
		defaulted(t, config.Route{Topic: byKey, Ordered: true}),
		defaulted(t, config.Route{Topic: byField, Ordered: true, Key: config.FieldRef{Field: "customer"},
			Dedupe: config.FieldRef{Field: "event"}}),
		defaulted(t, config.Route{Topic: plain}),
	}
	long := testenv.Noise(9000)
	// Interleaved with good records, so that a halted partition shows.
	testenv.Produce(t, byKey,
		&kgo.Record{Key: []byte("a"), Value: []byte("1")},
		&kgo.Record{Key: []byte(long), Value: []byte("2")},
		&kgo.Record{Key: []byte{0xff, 0xfe}, Value: []byte("3")},
		&kgo.Record{Key: []byte("b"), Value: []byte("4")})
	testenv.Produce(t, byField,
		&kgo.Record{Value: []byte(`{"customer":"c1","event":"e1"}`)},
		&kgo.Record{Value: []byte(`{"customer":"` + long[:3000] + `","event":"e2"}`)},
		&kgo.Record{Value: []byte(`{"customer":"c1","event":"` + long[:2000] + `"}`)},
		&kgo.Record{Value: []byte("{\"customer\":\"x\xffy\",\"event\":\"e4\"}")},
		&kgo.Record{Value: []byte("{\"customer\":\"x\xfey\",\"event\":\"e5\"}")},
		&kgo.Record{Value: []byte(`{"customer":"x\ud800y","event":"e6"}`)},
		&kgo.Record{Value: []byte(`{"customer":"c2","event":"e7"}`)})
	var plainRecs []*kgo.Record
	for i := range 40 {
		plainRecs = append(plainRecs, &kgo.Record{Partition: int32(i % 2), Value: fmt.Appendf(nil, "v%d", i)})
	}
	testenv.Produce(t, plain, plainRecs...)

	startConsumer(t, store, testenv.Name("g"), routes, nil)
	testenv.Eventually(t, 60*time.Second, "every partition stored to its end", func() bool {
		return testenv.Count(t, store, `SELECT coalesce(sum(next_offset), 0) FROM kafka_offsets`) == 4+7+40
	})
	for _, c := range []struct {
		topic      string
		jobs, dlqs int
	}{{byKey, 2, 2}, {byField, 2, 5}, {plain, 40, 0}} {
		if n := testenv.Count(t, store, `SELECT count(*) FROM all_jobs WHERE src_topic = $1`, c.topic); n != c.jobs {
			t.Errorf("%s: %d jobs, want %d", c.topic, n, c.jobs)
		}
		if n := testenv.Count(t, store, `SELECT count(*) FROM dlq_entries WHERE src_topic = $1`, c.topic); n != c.dlqs {
			t.Errorf("%s: %d DLQ entries, want %d", c.topic, n, c.dlqs)
		}
	}
	// No key was rewritten: nothing holds U+FFFD, and the two spellings
	// that would have read alike are parked, each on its own.
	if n := testenv.Count(t, store, `SELECT count(*) FROM all_jobs WHERE strpos(key, U&'\FFFD') > 0`); n != 0 {
		t.Errorf("%d jobs with a rewritten key", n)
	}
	var reasons []string
	rows, err := store.Pool().Query(context.Background(), `SELECT reason || ': ' || last_error FROM dlq_entries ORDER BY src_topic, src_offset`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var r string
		if err := rows.Scan(&r); err != nil {
			t.Fatal(err)
		}
		reasons = append(reasons, r)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	t.Logf("parked: %s", strings.Join(reasons, "; "))
}

// FuzzIngest drives random keys, values and headers through decode and
// the real commit into Postgres: the commit always succeeds, the stored
// offset always reaches past the record, and the record is a job or a
// DLQ entry (I1, I6). `go test` runs the seeds; `go test -fuzz
// FuzzIngest ./ingest/` explores.
func FuzzIngest(f *testing.F) {
	f.Add([]byte("k"), []byte(`{"customer":"c1","event":"e1","v":3}`), "h", []byte("v"))
	f.Add([]byte(testenv.Noise(9000)), []byte(`{"customer":"c","event":"e"}`), "event", []byte("x"))
	f.Add([]byte{0xff, 0x00}, []byte("{\"customer\":\"\xff\",\"event\":\"\\ud800\"}"), "event", []byte("e\x00"))
	f.Add([]byte(nil), []byte(`{"customer":"`+testenv.Noise(3000)+`","event":"e","v":"1"}`), "\x00\xff", []byte{0xc3})
	f.Add([]byte("k"), []byte(`{"customer":{"id":1e400},"event":[1],"v":9223372036854775808}`), "content-type", []byte(nil))
	store := testenv.MigratedStore(f)
	// Small limits, so that the fuzzer reaches them.
	small := func(r config.Route) config.Route { r.MaxRecordBytes, r.DLQMaxBytes = 16<<10, new(1<<10); return r }
	routes := []*Route{
		defaulted(f, small(config.Route{Topic: "fields", Ordered: true, Key: config.FieldRef{Field: "customer"},
			Dedupe:  config.FieldRef{Header: "event"},
			Version: &config.Version{FieldRef: config.FieldRef{Field: "v"}, Policy: "newer"}})),
		defaulted(f, small(config.Route{Topic: "keys", Ordered: true, Dedupe: config.FieldRef{Field: "event"}})),
		defaulted(f, small(config.Route{Topic: "plain"})),
	}
	f.Fuzz(func(t *testing.T, key, value []byte, hk string, hv []byte) {
		// Positions come from the database, so that a re-run of an input
		// (the fuzzer minimizing one) continues where the last run ended.
		stored := map[string]int64{}
		rows, err := store.Pool().Query(context.Background(), `SELECT topic, next_offset FROM kafka_offsets`)
		if err != nil {
			t.Fatal(err)
		}
		var topic string
		var n int64
		if _, err := pgx.ForEachRow(rows, []any{&topic, &n}, func() error { stored[topic] = n; return nil }); err != nil {
			t.Fatal(err)
		}
		batch := pgstore.IngestBatch{Group: "g"}
		jobs := map[string]*pgstore.NewJob{}
		for _, r := range routes {
			off, exp := stored[r.Topic], stored[r.Topic]
			if _, ok := stored[r.Topic]; !ok {
				exp = -1
			}
			rec := &kgo.Record{Topic: r.Topic, Offset: off, Key: key, Value: value,
				Headers: []kgo.RecordHeader{{Key: hk, Value: hv}}}
			if job, poison := r.Decode(rec, time.Now()); job != nil {
				batch.Jobs = append(batch.Jobs, *job)
				jobs[r.Topic] = job
			} else {
				batch.Poison = append(batch.Poison, *poison)
			}
			batch.Offsets = append(batch.Offsets, pgstore.OffsetAdvance{Topic: r.Topic, Expected: exp, Next: off + 1})
		}
		if _, err := store.IngestCommit(context.Background(), batch); err != nil {
			t.Fatalf("commit failed, the partition would stop: %v", err)
		}
		for _, r := range routes {
			off := stored[r.Topic]
			if n := testenv.Count(t, store, `SELECT next_offset FROM kafka_offsets WHERE topic = $1`, r.Topic); int64(n) != off+1 {
				t.Fatalf("%s: stored offset %d, want %d", r.Topic, n, off+1)
			}
			// A record is a DLQ entry, or a job: its own, or the one an
			// earlier record of its dedupe key made (I1, I2).
			parked := testenv.Count(t, store, `SELECT count(*) FROM dlq_entries WHERE src_topic = $1 AND src_offset = $2`, r.Topic, off)
			job, found := jobs[r.Topic], 0
			if job != nil {
				found = testenv.Count(t, store, `SELECT count(*) FROM all_jobs WHERE route = $1 AND origin = 'kafka' AND dedupe_key = $2`,
					job.Route, job.DedupeKey)
			}
			if parked+found != 1 {
				t.Fatalf("%s/%d: %d DLQ entries and %d jobs, want one of them", r.Topic, off, parked, found)
			}
		}
	})
}
