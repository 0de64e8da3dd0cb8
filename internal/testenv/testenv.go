// Package testenv gives tests the real services they run against: a
// PostgreSQL schema of their own and Kafka topics of their own, on the
// servers named by SWITCHYARD_DATABASE_URL and SWITCHYARD_KAFKA_BROKERS
// (`make test` starts both with deploy/local/), or on a test's private
// instances (StartPostgres, StartKafka) when it must stop or restart one.
// A test never skips for want of them: it fails and says how to get them.
package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/switchyard-dev/switchyard/config"
	"github.com/switchyard-dev/switchyard/internal/pgstore"
)

const howTo = "run `make test`, or start the services with `make services-up` and `source deploy/local/env.sh`"

// Services names a PostgreSQL server and a Kafka cluster: the shared ones
// (Shared) or a test's private ones. Its methods give a test what it needs
// on either.
type Services struct {
	DatabaseURL string
	Brokers     []string
}

// Shared returns the services named by SWITCHYARD_DATABASE_URL and
// SWITCHYARD_KAFKA_BROKERS — or, when neither is set and a Docker engine
// answers, containers of both started through testcontainers-go — or
// fails the test. They serve every test
// package at once: a test never stops or restarts them.
func Shared(t testing.TB) Services {
	t.Helper()
	switch chooseServices(os.Getenv, dockerAnswers) {
	case fromContainers:
		svc, err := startContainers()
		if err != nil {
			t.Fatalf("starting the services in containers (no SWITCHYARD_* variable is set, and Docker answers): %v", err)
		}
		return svc
	case fromNowhere:
		t.Fatalf("SWITCHYARD_DATABASE_URL and SWITCHYARD_KAFKA_BROKERS are not set, and no Docker engine answers: %s", howTo)
	}
	u := os.Getenv("SWITCHYARD_DATABASE_URL")
	if u == "" {
		t.Fatalf("SWITCHYARD_DATABASE_URL is not set: %s", howTo)
	}
	var bs []string
	for _, b := range strings.Split(os.Getenv("SWITCHYARD_KAFKA_BROKERS"), ",") {
		if b = strings.TrimSpace(b); b != "" {
			bs = append(bs, b)
		}
	}
	if len(bs) == 0 {
		t.Fatalf("SWITCHYARD_KAFKA_BROKERS is not set: %s", howTo)
	}
	return Services{DatabaseURL: u, Brokers: bs}
}

// Env is the environment that points a child process at these services
// (SWITCHYARD_DATABASE_URL, SWITCHYARD_KAFKA_BROKERS). Appended to the
// test's own environment it wins, as os/exec keeps the last value of a
// repeated key; and the binary's environment wins over its config file.
func (s Services) Env() []string {
	return []string{"SWITCHYARD_DATABASE_URL=" + s.DatabaseURL, "SWITCHYARD_KAFKA_BROKERS=" + strings.Join(s.Brokers, ",")}
}

// Store opens a store on the given schema, closed when the test ends.
func (s Services) Store(t testing.TB, schema string) *pgstore.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := pgstore.Open(ctx, pgstore.Config{URL: s.DatabaseURL, Schema: schema, MaxConns: 8})
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(st.Close)
	return st
}

// Schema creates a migrated schema of its own for the test and returns
// its name; it is dropped when the test ends.
func (s Services) Schema(t testing.TB) string {
	t.Helper()
	schema := Name("t")
	st := s.Store(t, schema)
	if _, err := st.Migrate(context.Background()); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := st.DropSchema(ctx); err != nil {
			t.Logf("drop schema %s: %v", schema, err)
		}
	})
	return schema
}

// Topic creates a topic with the given partition count, deleted when the
// test ends. The delete is short and its failure ignored: a private broker
// may be down or gone by then, and a topic left on the shared one only
// takes room.
func (s Services) Topic(t testing.TB, partitions int32) string {
	t.Helper()
	topic := Name("topic")
	adm := s.Admin(t)
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
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, _ = adm.DeleteTopics(ctx, topic)
	})
	return topic
}

// Admin returns a kadm client, closed when the test ends.
func (s Services) Admin(t testing.TB) *kadm.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(s.Brokers...))
	if err != nil {
		t.Fatalf("kafka client: %v", err)
	}
	t.Cleanup(cl.Close)
	return kadm.NewClient(cl)
}

// Produce writes records synchronously and returns them with their
// offsets. Records without a topic go to topic; a record's Timestamp, when
// set, is kept (the client sets time.Now otherwise).
func (s Services) Produce(t testing.TB, topic string, recs ...*kgo.Record) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(s.Brokers...), kgo.DefaultProduceTopic(topic),
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

// DatabaseURL is Shared(t).DatabaseURL.
func DatabaseURL(t testing.TB) string {
	t.Helper()
	return Shared(t).DatabaseURL
}

// Brokers is Shared(t).Brokers.
func Brokers(t testing.TB) []string {
	t.Helper()
	return Shared(t).Brokers
}

// Schema is Shared(t).Schema(t).
func Schema(t testing.TB) string {
	t.Helper()
	return Shared(t).Schema(t)
}

// Store is Shared(t).Store(t, schema).
func Store(t testing.TB, schema string) *pgstore.Store {
	t.Helper()
	return Shared(t).Store(t, schema)
}

// MigratedStore is Store(t, Schema(t)).
func MigratedStore(t testing.TB) *pgstore.Store {
	t.Helper()
	return Store(t, Schema(t))
}

// Count runs query, which selects one integer (a count), on s, failing
// the test on an error.
func Count(t testing.TB, s *pgstore.Store, query string, args ...any) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var n int
	if err := s.Pool().QueryRow(ctx, query, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

// Pairs runs a query of two text columns and returns its rows as a map
// from the first to the second, failing the test on any error.
func Pairs(t testing.TB, s *pgstore.Store, query string, args ...any) map[string]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rows, _ := s.Pool().Query(ctx, query, args...)
	m := map[string]string{}
	var k, v string
	if _, err := pgx.ForEachRow(rows, []any{&k, &v}, func() error { m[k] = v; return nil }); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return m
}

// Names is the sorted names of ids, by a fixture's names of its items:
// what a test compares, where ids differ from one fixture to the next.
func Names(name map[int64]string, ids []int64) []string {
	out := make([]string, 0, len(ids))
	for _, id := range ids {
		out = append(out, name[id])
	}
	slices.Sort(out)
	return out
}

// ClaimOne claims the one runnable job of queue under a minute's lease,
// failing the test unless exactly one was claimed.
func ClaimOne(t testing.TB, s *pgstore.Store, queue string) *pgstore.Claimed {
	t.Helper()
	jobs, _, err := s.JobClaim(context.Background(), pgstore.JobClaimParams{Queue: queue, Limit: 1,
		Lease: time.Minute, MaxRuntime: time.Hour})
	if err != nil || len(jobs) != 1 {
		t.Fatalf("claim: %v %v", jobs, err)
	}
	return jobs[0]
}

// Topic is Shared(t).Topic(t, partitions).
func Topic(t testing.TB, partitions int32) string {
	t.Helper()
	return Shared(t).Topic(t, partitions)
}

// Admin is Shared(t).Admin(t).
func Admin(t testing.TB) *kadm.Client {
	t.Helper()
	return Shared(t).Admin(t)
}

// Produce is Shared(t).Produce(t, topic, recs...).
func Produce(t testing.TB, topic string, recs ...*kgo.Record) []*kgo.Record {
	t.Helper()
	return Shared(t).Produce(t, topic, recs...)
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

// KafkaBlock is a kafka config block with the file's defaults, as
// config.Load leaves it; fetchMaxRecords 0 keeps the default.
func KafkaBlock(brokers []string, group string, fetchMaxRecords int) config.Kafka {
	c := config.Config{Kafka: config.Kafka{Brokers: brokers, Group: group, FetchMaxRecords: fetchMaxRecords}}
	c.SetDefaults()
	return c.Kafka
}

// Eventually polls cond every 20ms until it is true or the deadline
// passes; tests wait on conditions, never on sleeps.
func Eventually(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	if !Until(within, cond) {
		t.Fatalf("timed out after %s waiting for %s", within, what)
	}
}

// WaitBlockedBy waits until another backend waits for a lock that tx
// holds: what tx holds has been reached (what says by what, for the
// failure). It names tx's own backend, so that a test is never misled by
// the lock waits of other tests sharing the database.
func WaitBlockedBy(t testing.TB, s *pgstore.Store, tx pgx.Tx, what string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var pid int32
	if err := tx.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		t.Fatalf("the holder's backend: %v", err)
	}
	Eventually(t, 30*time.Second, what, func() bool {
		return Count(t, s, `SELECT count(*) FROM pg_stat_activity WHERE $1::int = ANY(pg_blocking_pids(pid))`, pid) > 0
	})
}

// Until is Eventually for a caller with more to say when the wait fails:
// it polls cond every 20ms and reports whether cond came true within the
// time given.
func Until(within time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}
