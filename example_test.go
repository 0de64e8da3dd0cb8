package switchyard_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	switchyard "github.com/switchyard-dev/switchyard"
	"github.com/switchyard-dev/switchyard/config"
	"github.com/switchyard-dev/switchyard/internal/pgstore"
	"github.com/switchyard-dev/switchyard/internal/testenv"
	"github.com/switchyard-dev/switchyard/workers"
)

// A Go program embeds the engine: the same YAML as the binary, a route
// with `target: {go: true}`, and a handler registered for its kind.
func Example() {
	topic, schema := testenv.Name("orders"), testenv.Name("example")
	cfg, err := config.Parse(fmt.Appendf(nil, `
postgres: {schema: %s}
http: {listen: "off"}
queues:
  interactive: {concurrency: 4, poll_interval: 50ms}
routes:
  - topic: %s
    kind: order.sync
    queue: interactive
    key: {field: customer_id}
    target: {go: true}
`, schema, topic), os.Getenv) // brokers and database from SWITCHYARD_* variables
	if err != nil {
		fmt.Println(err)
		return
	}
	migrate(cfg) // what `switchyard migrate` does
	defer dropSchema(cfg)

	eng, err := switchyard.New(cfg, switchyard.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	done := make(chan struct{})
	_ = eng.Register("order.sync", workers.HandlerFunc(func(ctx context.Context, job *workers.Job) error {
		fmt.Printf("synced customer %s: %s (attempt %d)\n", job.Key, job.Payload, job.Attempt)
		close(done)
		return nil // or workers.Permanent(err), workers.RetryAfter(d, err), or any error to retry
	}))
	ctx := context.Background()
	if err := eng.Start(ctx); err != nil {
		fmt.Println(err)
		return
	}
	defer eng.Stop(ctx) //nolint:errcheck

	produce(cfg, topic, `{"customer_id":"c-1","total":42}`)
	select {
	case <-done:
	case <-time.After(time.Minute):
		fmt.Println("timed out")
	}
	// Output: synced customer c-1: {"customer_id":"c-1","total":42} (attempt 1)
}

func migrate(cfg *config.Config) {
	s, err := pgstore.Open(context.Background(), pgstore.Config{URL: cfg.Postgres.URL, Schema: cfg.Postgres.Schema})
	if err != nil {
		panic(err)
	}
	defer s.Close()
	if _, err := s.Migrate(context.Background()); err != nil {
		panic(err)
	}
}

func dropSchema(cfg *config.Config) {
	s, err := pgstore.Open(context.Background(), pgstore.Config{URL: cfg.Postgres.URL, Schema: cfg.Postgres.Schema})
	if err != nil {
		return
	}
	defer s.Close()
	_ = s.DropSchema(context.Background())
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
