package ingest

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap/zaptest"

	"github.com/switchyard-dev/switchyard/internal/pgstore"
	"github.com/switchyard-dev/switchyard/internal/testenv"
)

// commitCounter counts the OffsetCommit requests a client writes.
type commitCounter struct{ n atomic.Int64 }

func (c *commitCounter) OnBrokerWrite(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	const offsetCommit = 8
	if key == offsetCommit && err == nil {
		c.n.Add(1)
	}
}

// startPaced starts a consumer whose Kafka commits are paced an hour
// apart: only the first store after a quiet spell, a revoke and Stop
// commit within a test.
func startPaced(t *testing.T, store *pgstore.Store, topic, group string, hooks *commitCounter) *Consumer {
	t.Helper()
	cfg := Config{Kafka: testenv.KafkaBlock(testenv.Brokers(t), group, 50), Routes: []*Route{route(t, topic, "")},
		Opts: []kgo.Opt{kgo.WithHooks(hooks)}}
	c, err := New(cfg, store, zaptest.NewLogger(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	c.commitEvery = time.Hour
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop(context.Background()) })
	return c
}

// kafkaCommitted is the group's committed offset of each partition of
// topic (-1 where none).
func kafkaCommitted(t *testing.T, group, topic string, partitions int32) []int64 {
	t.Helper()
	resp, err := testenv.Admin(t).FetchOffsets(context.Background(), group)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]int64, partitions)
	for p := range out {
		out[p] = -1
		if o, ok := resp.Lookup(topic, int32(p)); ok && o.Err == nil {
			out[p] = o.At
		}
	}
	return out
}

func storedSum(t *testing.T, store *pgstore.Store, group string) int {
	t.Helper()
	return testenv.Count(t, store, `SELECT coalesce(sum(next_offset), 0)::int FROM kafka_offsets WHERE group_id = $1`, group)
}

// Kafka's committed offset follows the stored one at a pace, not after
// every transaction: the first store is committed at once, later ones
// wait their turn, and Stop commits what is left.
func TestKafkaCommitsArePaced(t *testing.T) {
	t.Parallel()
	store := testenv.MigratedStore(t)
	topic := testenv.Topic(t, 1)
	group := testenv.Name("g")
	hooks := &commitCounter{}
	// Produced before the consumer starts, the first ten come in one
	// poll: the first commit carries all of them.
	testenv.Produce(t, topic, records(0, 0, 10)...)
	c := startPaced(t, store, topic, group, hooks)
	testenv.Eventually(t, 30*time.Second, "the first batch committed to Kafka", func() bool {
		return kafkaCommitted(t, group, topic, 1)[0] == 10
	})
	for i := 1; i <= 3; i++ {
		testenv.Produce(t, topic, records(0, i*10, i*10+10)...)
		testenv.Eventually(t, 30*time.Second, "the next batch stored", func() bool {
			return storedSum(t, store, group) == i*10+10
		})
	}
	// An unpaced commit follows its store by milliseconds.
	time.Sleep(500 * time.Millisecond)
	if got := kafkaCommitted(t, group, topic, 1)[0]; got != 10 {
		t.Fatalf("Kafka's committed offset = %d before its turn, want 10 (the first batch's)", got)
	}
	if err := c.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := kafkaCommitted(t, group, topic, 1)[0]; got != 40 {
		t.Fatalf("Kafka's committed offset = %d after Stop, want 40", got)
	}
	if n := hooks.n.Load(); n != 2 {
		t.Fatalf("%d Kafka commits for 4 stored batches, want 2 (the first, then Stop's)", n)
	}
}

// A partition revoked by a rebalance has its last stored offset
// committed to Kafka before it goes, so lag tools read it right while
// its new owner has nothing to store. Both members pace their commits an
// hour apart, so only the old owner's revoke can have committed it.
func TestRevokedPartitionsAreCommittedBeforeTheyGo(t *testing.T) {
	t.Parallel()
	store := testenv.MigratedStore(t)
	const partitions = 4
	topic := testenv.Topic(t, partitions)
	group := testenv.Name("g")
	first := &commitCounter{}
	startPaced(t, store, topic, group, first)
	for p := range int32(partitions) {
		testenv.Produce(t, topic, records(p, 0, 5)...)
	}
	testenv.Eventually(t, 30*time.Second, "the first batches stored and a commit sent", func() bool {
		return storedSum(t, store, group) == partitions*5 && first.n.Load() > 0
	})
	for p := range int32(partitions) {
		testenv.Produce(t, topic, records(p, 5, 10)...)
	}
	testenv.Eventually(t, 30*time.Second, "the second batches stored", func() bool {
		return storedSum(t, store, group) == partitions*10
	})

	c2 := startPaced(t, store, topic, group, &commitCounter{})
	var moved []int32
	testenv.Eventually(t, 60*time.Second, "the second member to own partitions", func() bool {
		c2.mu.Lock()
		defer c2.mu.Unlock()
		moved = moved[:0]
		for p := range c2.expected {
			moved = append(moved, p.partition)
		}
		return len(moved) > 0
	})
	committed := kafkaCommitted(t, group, topic, partitions)
	for _, p := range moved {
		if committed[p] != 10 {
			t.Errorf("partition %d moved with Kafka's committed offset at %d, want its stored 10", p, committed[p])
		}
	}
}
