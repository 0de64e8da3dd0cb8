// Package testenv gives tests the real services they run against: a
// PostgreSQL schema of their own and Kafka topics of their own, on the
// servers named by SWITCHYARD_DATABASE_URL and SWITCHYARD_KAFKA_BROKERS
// (`make test` starts both with deploy/local/). A test never skips for
// want of them: it fails and says how to get them.
package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/switchyard-dev/switchyard/config"
	"github.com/switchyard-dev/switchyard/internal/pgstore"
)

const howTo = "run `make test`, or start the services with `make services-up` and `source deploy/local/env.sh`"

// DatabaseURL returns SWITCHYARD_DATABASE_URL or fails the test.
func DatabaseURL(t testing.TB) string {
	t.Helper()
	u := os.Getenv("SWITCHYARD_DATABASE_URL")
	if u == "" {
		t.Fatalf("SWITCHYARD_DATABASE_URL is not set: %s", howTo)
	}
	return u
}

// Brokers returns SWITCHYARD_KAFKA_BROKERS or fails the test.
func Brokers(t testing.TB) []string {
	t.Helper()
	var bs []string
	for _, b := range strings.Split(os.Getenv("SWITCHYARD_KAFKA_BROKERS"), ",") {
		if b = strings.TrimSpace(b); b != "" {
			bs = append(bs, b)
		}
	}
	if len(bs) == 0 {
		t.Fatalf("SWITCHYARD_KAFKA_BROKERS is not set: %s", howTo)
	}
	return bs
}

// Name returns a unique lower-case name with the given prefix, usable as
// a schema, topic or group name.
func Name(prefix string) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return prefix + "_" + hex.EncodeToString(b)
}

// Noise returns n characters that compress badly, as real long ids
// (hashes, URLs) do: a long key that Postgres cannot shrink under its
// index-entry limit.
func Noise(n int) string {
	b := make([]byte, (n+1)/2)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)[:n]
}

// Schema creates a migrated schema of its own for the test and returns
// its name; it is dropped when the test ends.
func Schema(t testing.TB) string {
	t.Helper()
	schema := Name("t")
	s := Store(t, schema)
	if _, err := s.Migrate(context.Background()); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := s.DropSchema(ctx); err != nil {
			t.Logf("drop schema %s: %v", schema, err)
		}
	})
	return schema
}

// Store opens a store on the given schema, closed when the test ends.
func Store(t testing.TB, schema string) *pgstore.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := pgstore.Open(ctx, pgstore.Config{URL: DatabaseURL(t), Schema: schema, MaxConns: 8})
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(s.Close)
	return s
}

// MigratedStore is Store(t, Schema(t)).
func MigratedStore(t testing.TB) *pgstore.Store {
	t.Helper()
	return Store(t, Schema(t))
}

// Topic creates a topic with the given partition count, deleted when the
// test ends.
func Topic(t testing.TB, partitions int32) string {
	t.Helper()
	topic := Name("topic")
	adm := Admin(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := adm.CreateTopic(ctx, partitions, 1, nil, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		t.Fatalf("create topic: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = adm.DeleteTopics(ctx, topic)
	})
	return topic
}

// KafkaBlock is a kafka config block with the file's defaults, as
// config.Load leaves it; fetchMaxRecords 0 keeps the default.
func KafkaBlock(brokers []string, group string, fetchMaxRecords int) config.Kafka {
	c := config.Config{Kafka: config.Kafka{Brokers: brokers, Group: group, FetchMaxRecords: fetchMaxRecords}}
	c.SetDefaults()
	return c.Kafka
}

// Admin returns a kadm client, closed when the test ends.
func Admin(t testing.TB) *kadm.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(Brokers(t)...))
	if err != nil {
		t.Fatalf("kafka client: %v", err)
	}
	t.Cleanup(cl.Close)
	return kadm.NewClient(cl)
}

// Produce writes records synchronously and returns them with their
// offsets. Records without a topic go to topic.
func Produce(t testing.TB, topic string, recs ...*kgo.Record) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(Brokers(t)...), kgo.DefaultProduceTopic(topic),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatalf("kafka client: %v", err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
	return recs
}

// Eventually polls cond every 20ms until it is true or the deadline
// passes; tests wait on conditions, never on sleeps.
func Eventually(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", within, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
