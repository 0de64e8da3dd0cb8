package ordering_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	switchyard "github.com/switchyard-dev/switchyard"
	"github.com/switchyard-dev/switchyard/config"
	"github.com/switchyard-dev/switchyard/internal/pgstore"
	"github.com/switchyard-dev/switchyard/internal/testenv"
	"github.com/switchyard-dev/switchyard/ordering"
	"github.com/switchyard-dev/switchyard/workers"
)

// A handler keeps its own table of customers and applies each record's
// version in the same transaction as the job's completion. Versions 3 and
// then 2 arrive for one customer: 3 is applied, 2 is stale and never runs
// fn, so the table can never go back in time — not even across crashes
// and retries.
func ExampleApplier_Apply() {
	topic, schema := testenv.Name("customers"), testenv.Name("example")
	cfg, err := config.Parse(fmt.Appendf(nil, `
postgres: {schema: %s}
http: {listen: "off"}
queues:
  sync: {concurrency: 4, poll_interval: 50ms}
routes:
  - topic: %s
    kind: customer.sync
    queue: sync
    ordered: true
    key: {field: id}
    version: {field: seq, policy: newer}
    target: {go: true}
`, schema, topic), os.Getenv)
	if err != nil {
		fmt.Println(err)
		return
	}
	eng, err := switchyard.New(cfg, switchyard.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	var applier *ordering.Applier
	done := make(chan struct{}, 2)
	_ = eng.Register("customer.sync", workers.HandlerFunc(func(ctx context.Context, job *workers.Job) error {
		defer func() { done <- struct{}{} }()
		err := applier.Apply(ctx, job, func(ctx context.Context, tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `INSERT INTO customers (id, seq) VALUES ($1, $2)
				ON CONFLICT (id) DO UPDATE SET seq = excluded.seq`, job.Key, *job.Version)
			return err
		})
		if errors.Is(err, ordering.ErrStale) {
			return nil // an older version: nothing to do, nothing to retry
		}
		return err
	}))

	ctx := context.Background()
	store := setUp(cfg)
	defer tearDown(store)
	if err := eng.Start(ctx); err != nil {
		fmt.Println(err)
		return
	}
	defer eng.Stop(ctx) //nolint:errcheck
	applier = ordering.New(eng.Store())

	produce(cfg, topic, `{"id":"c-1","seq":3}`)
	<-done
	produce(cfg, topic, `{"id":"c-1","seq":2}`)
	waitForState(store, "skipped")

	var seq int64
	_ = store.Pool().QueryRow(ctx, `SELECT seq FROM customers WHERE id = 'c-1'`).Scan(&seq)
	fmt.Println("customer c-1 at version", seq)
	// Output: customer c-1 at version 3
}

// setUp migrates the example's schema and creates the handler's table in
// the same database.
func setUp(cfg *config.Config) *pgstore.Store {
	ctx := context.Background()
	s, err := pgstore.Open(ctx, pgstore.Config{URL: cfg.Postgres.URL, Schema: cfg.Postgres.Schema})
	if err != nil {
		panic(err)
	}
	if _, err := s.Migrate(ctx); err != nil {
		panic(err)
	}
	if _, err := s.Pool().Exec(ctx, `CREATE TABLE customers (id text PRIMARY KEY, seq bigint NOT NULL)`); err != nil {
		panic(err)
	}
	return s
}

func tearDown(s *pgstore.Store) {
	_ = s.DropSchema(context.Background())
	s.Close()
}

func produce(cfg *config.Config, topic, value string) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(cfg.Kafka.Brokers...), kgo.AllowAutoTopicCreation())
	if err != nil {
		panic(err)
	}
	defer cl.Close()
	if err := cl.ProduceSync(context.Background(), &kgo.Record{Topic: topic, Value: []byte(value)}).FirstErr(); err != nil {
		panic(err)
	}
}

func waitForState(s *pgstore.Store, state string) {
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		var n int
		_ = s.Pool().QueryRow(context.Background(), `SELECT count(*) FROM jobs WHERE state = $1`, state).Scan(&n)
		if n > 0 {
			return
		}
	}
}
