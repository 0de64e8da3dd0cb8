package ingest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/internal/testenv"
)

// holdRoutes is a flow control that holds the routes it is told to.
type holdRoutes struct {
	mu   sync.Mutex
	held map[string]bool
}

func (h *holdRoutes) RouteHold(route string) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.held[route] {
		return "paused"
	}
	return ""
}

func (h *holdRoutes) Added(context.Context, string, int) {}

func (h *holdRoutes) set(route string, held bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.held[route] = held
}

// A topic whose hold is lifted is fetched at once, not after the fetch
// already in flight for the process's other topics: that fetch waits for
// data up to the fetch's max wait (the client's default, 5 s, held a
// resumed topic's records, or a partition's newly assigned to the
// process, that long behind an idle one; kafkaopts.go).
func TestResumedTopicIsFetchedWithoutWaitingOutAnIdleFetch(t *testing.T) {
	t.Parallel()
	store := testenv.MigratedStore(t)
	busy, held := route(t, testenv.Topic(t, 1), "event"), route(t, testenv.Topic(t, 1), "event")
	busy.Name, held.Name = "busy", "held"
	holds := &holdRoutes{held: map[string]bool{held.Name: true}}
	c := startWith(t, store, Config{Kafka: testenv.KafkaBlock(testenv.Brokers(t), testenv.Name("g"), 50),
		Routes: []*Route{busy, held}, Holds: holds}, nil, nil)
	stored := func(topic string) int {
		return testenv.Count(t, store, `SELECT coalesce(sum(next_offset), 0) FROM kafka_offsets WHERE topic = $1`, topic)
	}
	testenv.Produce(t, held.Topic, records(0, 0, 1)...)
	// A record of the other topic, once stored, means the client has just
	// sent its next fetch, for that topic alone: it waits for new data.
	testenv.Produce(t, busy.Topic, records(0, 0, 1)...)
	testenv.Eventually(t, 60*time.Second, "the other topic's record stored", func() bool { return stored(busy.Topic) == 1 })
	if n := stored(held.Topic); n != 0 {
		t.Fatalf("%d records of the held topic stored", n)
	}
	holds.set(held.Name, false)
	resumed := time.Now()
	c.ApplyHolds()
	testenv.Eventually(t, 60*time.Second, "the resumed topic's record stored", func() bool { return stored(held.Topic) == 1 })
	// The bound is the fetch's max wait (500 ms) with room for a loaded
	// machine; the client's default made it 5 s.
	if d := time.Since(resumed); d > 3*time.Second {
		t.Errorf("the resumed topic's record was stored %s after its hold was lifted, want well under the 5 s an idle fetch waits by default", d.Round(time.Millisecond))
	}
	t.Logf("stored %s after the hold was lifted", time.Since(resumed).Round(time.Millisecond))
}
