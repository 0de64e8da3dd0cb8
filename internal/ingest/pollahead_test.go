package ingest

import (
	"context"
	"errors"
	"maps"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"

	"github.com/switchyard-dev/switchyard/internal/pgstore"
	"github.com/switchyard-dev/switchyard/internal/testenv"
)

// A poll taken ahead keeps only what continues the positions the batch
// before it leaves: the records of the partitions that batch re-reads are
// dropped (the re-seek covers them), and those of a topic held meanwhile
// are dropped and their positions rewound to the first of them.
func TestKeepAheadDropsWhatIsReadAgainOrHeld(t *testing.T) {
	t.Parallel()
	a, b := route(t, "a", ""), route(t, "b", "")
	c, err := New(Config{Kafka: testenv.KafkaBlock([]string{"127.0.0.1:1"}, "g", 100), Routes: []*Route{a, b}}, nil, zap.NewNop(), nil)
	if err != nil {
		t.Fatal(err)
	}
	c.expected = map[tp]int64{{"a", 0}: 10, {"a", 1}: -1, {"b", 0}: 5}
	fetch := func() kgo.Fetches {
		part := func(topic string, p int32, from, to int64) kgo.FetchPartition {
			fp := kgo.FetchPartition{Partition: p}
			for o := from; o < to; o++ {
				fp.Records = append(fp.Records, &kgo.Record{Topic: topic, Partition: p, Offset: o, Value: []byte(`{"customer":"c"}`)})
			}
			return fp
		}
		return kgo.Fetches{{Topics: []kgo.FetchTopic{
			{Topic: "a", Partitions: []kgo.FetchPartition{part("a", 0, 10, 13), part("a", 1, 20, 22)}},
			{Topic: "b", Partitions: []kgo.FetchPartition{part("b", 0, 5, 7)}},
		}}}
	}
	jobs := func(p *polled) map[tp]int {
		out := map[tp]int{}
		for _, j := range p.batch.Jobs {
			out[tp{j.Topic, j.Partition}]++
		}
		if len(p.batch.Offsets) != len(out) {
			t.Errorf("%d partitions advanced for jobs in %d", len(p.batch.Offsets), len(out))
		}
		return out
	}
	for _, tc := range []struct {
		name   string
		reread map[tp]int64
		held   string
		kept   map[tp]int // nil: nothing kept
		rewind map[tp]int64
	}{
		{name: "nothing re-read or held", kept: map[tp]int{{"a", 0}: 3, {"a", 1}: 2, {"b", 0}: 2}},
		{name: "a/0 re-read", reread: map[tp]int64{{"a", 0}: 8}, kept: map[tp]int{{"a", 1}: 2, {"b", 0}: 2}},
		{name: "b held", held: "b", kept: map[tp]int{{"a", 0}: 3, {"a", 1}: 2}, rewind: map[tp]int64{{"b", 0}: 5}},
		{name: "b re-read and held", reread: map[tp]int64{{"b", 0}: 5}, held: "b", kept: map[tp]int{{"a", 0}: 3, {"a", 1}: 2}},
		{name: "all dropped", reread: map[tp]int64{{"a", 0}: 10, {"a", 1}: 20}, held: "b", rewind: map[tp]int64{{"b", 0}: 5}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c.held = map[string]string{}
			if tc.held != "" {
				c.held[tc.held] = "paused"
			}
			next := c.build(fetch())
			kept, rewind := c.keepAhead(next, tc.reread)
			switch {
			case tc.kept == nil && kept != nil:
				t.Fatalf("kept %v, want nothing", jobs(kept))
			case tc.kept != nil && kept == nil:
				t.Fatalf("kept nothing, want %v", tc.kept)
			case kept != nil && !maps.Equal(jobs(kept), tc.kept):
				t.Fatalf("kept %v, want %v", jobs(kept), tc.kept)
			case len(tc.reread) == 0 && tc.held == "" && kept != next:
				t.Fatal("nothing to drop, and the poll was built again")
			}
			if !maps.Equal(rewind, tc.rewind) {
				t.Fatalf("rewind %v, want %v", rewind, tc.rewind)
			}
		})
	}
}

// I1 under polls taken ahead: while the consumer works through a backlog
// in small polls (each stored while the next is decoded), another writer
// stores a few records at a time from the partition's stored position,
// as a member that took the partition over would. Each such store fences
// the batch in hand; what was taken ahead of it is dropped and read again.
// Every record ends as exactly one job, and the stored position at the
// end of the partition.
func TestFencedUnderPollsTakenAheadLosesNothing(t *testing.T) {
	t.Parallel()
	fencedLosesNothing(t, 30000, 20)
}

// The same with polls large enough to be stored in two halves at once
// (pgstore.IngestSplit): a store by the other writer fences the first
// half, and then the second, which waits for it; or, landing between the
// two commits, the second alone. Either way what was refused is read
// again, and nothing of a refused half is stored.
func TestFencedUnderSplitPollsLosesNothing(t *testing.T) {
	t.Parallel()
	c := fencedLosesNothing(t, 120000, 2*pgstore.SplitMinJobs+500)
	if n := c.splitPolls.Load(); n < 5 {
		t.Fatalf("%d polls stored in two halves: the test proves nothing", n)
	} else {
		t.Logf("%d polls stored in two halves", n)
	}
}

// fencedLosesNothing runs the fence tests above over n records in polls
// of poll records, and returns the consumer.
func fencedLosesNothing(t *testing.T, n, poll int) *Consumer {
	const step = 5
	ctx := context.Background()
	store := testenv.MigratedStore(t)
	topic := testenv.Topic(t, 1)
	group := testenv.Name("g")
	recs := testenv.Produce(t, topic, records(0, 0, n)...)
	for i, rec := range recs {
		if rec.Offset != int64(i) {
			t.Fatalf("record %d was given offset %d", i, rec.Offset)
		}
	}
	r := route(t, topic, "event")
	c := startWith(t, store, Config{Kafka: testenv.KafkaBlock(testenv.Brokers(t), group, poll), Routes: []*Route{r}}, nil, nil)

	stored := func() int64 {
		t.Helper()
		offs, err := store.OffsetLoad(ctx, group, []string{topic})
		if err != nil {
			t.Fatal(err)
		}
		next, ok := offs[topic][0]
		if !ok {
			return -1
		}
		return next
	}
	stores := 0
	// At most 300 stores: under -race the writer would otherwise outrun
	// the consumer and store most of the partition itself.
	for at := stored(); at < int64(n)-200 && stores < 300; at = stored() {
		if at < 0 {
			time.Sleep(10 * time.Millisecond)
			continue
		}
		batch := pgstore.IngestBatch{Group: group, Offsets: []pgstore.OffsetAdvance{{Topic: topic, Partition: 0, Expected: at, Next: at + step}}}
		for _, rec := range recs[at : at+step] {
			job, poison := r.Decode(rec, time.Now())
			if poison != nil {
				t.Fatalf("record %d: %s", rec.Offset, poison.Error)
			}
			batch.Jobs = append(batch.Jobs, *job)
		}
		switch _, err := store.IngestCommit(ctx, batch); {
		case errors.Is(err, pgstore.ErrOffsetFenced):
			// The consumer stored a batch first: read its position again.
		case isDeadlock(err):
			// Its fence held the offsets row while its rows waited for
			// the second half of a split poll, itself waiting on that
			// row: Postgres broke the deadlock, and this writer tries
			// again, as a member would.
		case err != nil:
			t.Fatal(err)
		default:
			stores++
			time.Sleep(time.Millisecond)
		}
	}
	testenv.Eventually(t, 60*time.Second, "the partition stored to its end", func() bool { return stored() == int64(n) })
	t.Logf("%d stores of %d records by the other writer, each fencing the consumer's batch in hand", stores, step)
	if stores < 10 {
		t.Fatalf("only %d stores by the other writer: the test did not fence the consumer", stores)
	}
	if got := testenv.Count(t, store, `SELECT count(*) FROM all_jobs`); got != n {
		t.Fatalf("jobs = %d, want %d: one a record", got, n)
	}
	if got := testenv.Count(t, store, `SELECT count(DISTINCT dedupe_key) FROM all_jobs`); got != n {
		t.Fatalf("distinct dedupe keys = %d, want %d", got, n)
	}
	return c
}

// A rebalance is not held up by polls taken ahead: a member that joins
// while another works through a backlog in small polls (a chain of them,
// each stored while the next is decoded) is given partitions and stores
// records of them before the backlog is gone.
func TestRebalanceDuringPollsTakenAhead(t *testing.T) {
	t.Parallel()
	const parts, each = 4, 15000
	store := testenv.MigratedStore(t)
	topic := testenv.Topic(t, parts)
	group := testenv.Name("g")
	for p := range int32(parts) {
		testenv.Produce(t, topic, records(p, 0, each)...)
	}
	cfg := Config{Kafka: testenv.KafkaBlock(testenv.Brokers(t), group, 10), Routes: []*Route{route(t, topic, "")}}
	startWith(t, store, cfg, nil, nil)
	sum := func() int {
		return testenv.Count(t, store, `SELECT coalesce(sum(next_offset), 0) FROM kafka_offsets`)
	}
	testenv.Eventually(t, 60*time.Second, "the first member storing", func() bool { return sum() > 0 })
	second := startWith(t, store, cfg, nil, nil)
	testenv.Eventually(t, 60*time.Second, "the second member storing", func() bool {
		second.mu.Lock()
		defer second.mu.Unlock()
		return len(second.stored) > 0
	})
	if left := parts*each - sum(); left <= 0 {
		t.Fatal("the backlog was gone before the second member stored anything: the test proves nothing")
	} else {
		t.Logf("the second member stored records with %d of the backlog left", left)
	}
	testenv.Eventually(t, 120*time.Second, "the backlog stored", func() bool { return sum() == parts*each })
	if got := testenv.Count(t, store, `SELECT count(*) FROM all_jobs`); got != parts*each {
		t.Fatalf("jobs = %d, want %d", got, parts*each)
	}
}

// isDeadlock says whether err is a deadlock that Postgres broke.
func isDeadlock(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "40P01"
}
