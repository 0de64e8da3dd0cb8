package ingest

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/switchyard-dev/switchyard/internal/testenv"
)

// I2 read backwards: an API enqueue with Idempotency-Key k, then Kafka
// records whose dedupe field reads "k" and "api/k", make three jobs.
// Before, the API's key was stored as "api/k" in the route's one dedupe
// namespace, and the record with that value silently became no job.
func TestAPIAndKafkaDedupeKeysNeverCollide(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := testenv.MigratedStore(t)
	topic := testenv.Topic(t, 1)
	r := route(t, topic, "event")
	enq := NewEnqueuer(store, []*Route{r}, map[string]int{"q": 0})
	res, err := enq.Enqueue(ctx, EnqueueRequest{Queue: "q", Kind: "k", IdempotencyKey: "k", Payload: []byte(`{"customer":"c"}`)})
	if err != nil || !res.Created {
		t.Fatalf("enqueue: %+v %v", res, err)
	}
	testenv.Produce(t, topic,
		&kgo.Record{Value: []byte(`{"customer":"c","event":"api/k"}`)},
		&kgo.Record{Value: []byte(`{"customer":"c","event":"k"}`)})
	startConsumer(t, store, testenv.Name("g"), []*Route{r}, nil)
	testenv.Eventually(t, 60*time.Second, "both records stored", func() bool {
		return testenv.Count(t, store, `SELECT coalesce(sum(next_offset), 0) FROM kafka_offsets`) == 2
	})
	if n := testenv.Count(t, store, `SELECT count(*) FROM all_jobs`); n != 3 {
		t.Fatalf("%d jobs, want 3: one per origin and dedupe key", n)
	}
	if n := testenv.Count(t, store, `SELECT count(*) FROM all_jobs WHERE origin = 'kafka' AND dedupe_key IN ('k', 'api/k')`); n != 2 {
		t.Fatalf("%d Kafka jobs, want 2", n)
	}
}
