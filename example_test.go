package switchyard_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	switchyard "github.com/switchyard-dev/switchyard"
	"github.com/switchyard-dev/switchyard/config"
	"github.com/switchyard-dev/switchyard/workers"
)

// A Go program embeds the engine: the same YAML as the binary, a route
// with `target: {go: true}`, and a handler registered for its kind. It
// uses public packages only, so it can be copied out of this module.
func Example() {
	suffix := time.Now().UnixNano() // a topic and schema of the example's own
	topic, schema := fmt.Sprintf("orders_%d", suffix), fmt.Sprintf("example_%d", suffix)
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
	if _, err := switchyard.Migrate(context.Background(), cfg); err != nil { // what `switchyard migrate` does
		fmt.Println(err)
		return
	}
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

// dropSchema removes the example's schema again.
func dropSchema(cfg *config.Config) {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, cfg.Postgres.URL)
	if err != nil {
		return
	}
	defer conn.Close(ctx)
	_, _ = conn.Exec(ctx, `DROP SCHEMA `+pgx.Identifier{cfg.Postgres.Schema}.Sanitize()+` CASCADE`)
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
