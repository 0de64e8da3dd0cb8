package ingest

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/switchyard-dev/switchyard/internal/metrics"
	"github.com/switchyard-dev/switchyard/internal/testenv"
)

// fakeBroker is an in-process Kafka with one topic of two partitions and
// n records on it.
func fakeBroker(t *testing.T, topic string, n int) *kfake.Cluster {
	t.Helper()
	broker, err := kfake.NewCluster(kfake.SeedTopics(2, topic))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(broker.Close)
	fakeProduce(t, broker, topic, append(records(0, 0, n/2), records(1, n/2, n)...)...)
	return broker
}

// fakeProduce writes records to the fake broker, each to its partition.
func fakeProduce(t *testing.T, broker *kfake.Cluster, topic string, recs ...*kgo.Record) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(broker.ListenAddrs()...), kgo.DefaultProduceTopic(topic),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// Kafka refusing every offset commit loses nothing and duplicates
// nothing: the positions live in Postgres, and a new member resumes from
// them, not from Kafka's (absent) commits.
func TestKafkaCommitFailuresLoseNothing(t *testing.T) {
	t.Parallel()
	store := testenv.MigratedStore(t)
	topic, group := "orders", testenv.Name("g")
	broker := fakeBroker(t, topic, 40)
	broker.ControlKey(int16(kmsg.OffsetCommit), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		broker.KeepControl()
		req := kreq.(*kmsg.OffsetCommitRequest)
		resp := req.ResponseKind().(*kmsg.OffsetCommitResponse)
		for _, rt := range req.Topics {
			st := kmsg.NewOffsetCommitResponseTopic()
			st.Topic = rt.Topic
			for _, rp := range rt.Partitions {
				sp := kmsg.NewOffsetCommitResponseTopicPartition()
				sp.Partition = rp.Partition
				sp.ErrorCode = kerr.GroupAuthorizationFailed.Code // not retried by the client
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	core, logs := observer.New(zap.WarnLevel)
	start := func(m *metrics.Metrics) *Consumer {
		c, err := New(Config{Kafka: testenv.KafkaBlock(broker.ListenAddrs(), group, 10), Routes: []*Route{route(t, topic, "event")}}, store, zap.New(core), m)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Stop(context.Background()) })
		return c
	}
	first := start(nil)
	testenv.Eventually(t, 30*time.Second, "40 records stored", func() bool {
		return testenv.Count(t, store, `SELECT coalesce(sum(next_offset), 0) FROM kafka_offsets`) == 40
	})
	if logs.FilterMessageSnippet("kafka commit failed").Len() == 0 {
		t.Error("failed Kafka commits were not logged")
	}
	if err := first.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	m := metrics.New(prometheus.NewRegistry())
	start(m)
	// The second member reads nothing again: after a new record it has
	// stored exactly one more.
	fakeProduce(t, broker, topic, records(0, 40, 41)...)
	testenv.Eventually(t, 30*time.Second, "the new record stored", func() bool {
		return testenv.Count(t, store, `SELECT coalesce(sum(next_offset), 0) FROM kafka_offsets`) == 41
	})
	if d := testutil.ToFloat64(m.IngestRecords.WithLabelValues(topic, "duplicate")); d != 0 {
		t.Fatalf("%v records read again: resumed from Kafka, not Postgres", d)
	}
	if n := testenv.Count(t, store, `SELECT count(*) FROM all_jobs`); n != 41 {
		t.Fatalf("%d jobs, want 41", n)
	}
}

// A second member joining revokes partitions from the first in the middle
// of its work (both store records): every record still ends as one job,
// and the stored positions end at the partitions' ends.
func TestRevokeToANewMemberLosesNothing(t *testing.T) {
	t.Parallel()
	store := testenv.MigratedStore(t)
	topic, group := "orders", testenv.Name("g")
	const n = 200
	broker := fakeBroker(t, topic, n)
	start := func() *metrics.Metrics {
		m := metrics.New(prometheus.NewRegistry())
		c, err := New(Config{Kafka: testenv.KafkaBlock(broker.ListenAddrs(), group, 5), Routes: []*Route{route(t, topic, "event")}}, store, zap.NewNop(), m)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Stop(context.Background()) })
		return m
	}
	stored := func(m *metrics.Metrics) float64 {
		return testutil.ToFloat64(m.IngestRecords.WithLabelValues(topic, "job")) +
			testutil.ToFloat64(m.IngestRecords.WithLabelValues(topic, "duplicate"))
	}
	first := start()
	testenv.Eventually(t, 30*time.Second, "the first member under way", func() bool { return stored(first) > 0 })
	second := start()
	// More records while the group rebalances, until the second member
	// has taken a partition and stored some.
	total := n
	testenv.Eventually(t, 60*time.Second, "the second member to store records", func() bool {
		fakeProduce(t, broker, topic, append(records(0, total, total+10), records(1, total+10, total+20)...)...)
		total += 20
		return stored(second) > 0
	})
	testenv.Eventually(t, 120*time.Second, "every record stored", func() bool {
		return testenv.Count(t, store, `SELECT coalesce(sum(next_offset), 0) FROM kafka_offsets`) == total
	})
	if got := testenv.Count(t, store, `SELECT count(DISTINCT (src_partition, src_offset)) FROM all_jobs`); got != total {
		t.Fatalf("%d distinct records became jobs, want %d", got, total)
	}
	if got := testenv.Count(t, store, `SELECT count(*) FROM all_jobs`); got != total {
		t.Fatalf("%d jobs, want %d", got, total)
	}
}
