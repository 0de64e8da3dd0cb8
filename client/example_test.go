package client_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/jackc/pgx/v5"

	switchyard "github.com/switchyard-dev/switchyard"
	"github.com/switchyard-dev/switchyard/client"
	"github.com/switchyard-dev/switchyard/config"
)

// An application enqueues a job in the transaction that records the
// order it is for: both commit, or neither does. It uses public packages
// only, so it can be copied out of this module.
func ExampleClient_EnqueueTx() {
	ctx := context.Background()
	schema := fmt.Sprintf("example_client_%d", time.Now().UnixNano())
	cfg, err := config.Parse(fmt.Appendf(nil, `
postgres: {schema: %s}
queues:
  bulk: {concurrency: 4}
routes:
  - {topic: invoices, kind: invoice.render, queue: bulk, target: {http: {url: "http://127.0.0.1:9000/render"}}}
`, schema), os.Getenv) // the database from SWITCHYARD_DATABASE_URL
	if err != nil {
		fmt.Println(err)
		return
	}
	if _, err := switchyard.Migrate(ctx, cfg); err != nil {
		fmt.Println(err)
		return
	}
	c, err := client.New(ctx, cfg)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()

	// The application's own connection and transaction.
	conn, err := pgx.Connect(ctx, cfg.Postgres.URL)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer conn.Close(ctx)
	defer conn.Exec(ctx, `DROP SCHEMA `+pgx.Identifier{schema}.Sanitize()+` CASCADE`) //nolint:errcheck
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		// ... the application's own writes for order 42 go here ...
		job, err := c.EnqueueTx(ctx, tx, client.Job{Queue: "bulk", Kind: "invoice.render",
			Payload: []byte(`{"order":42}`), ContentType: "application/json", IdempotencyKey: "invoice-42"})
		fmt.Printf("created %v, %s\n", job.Created, job.State)
		return err
	})
	if err != nil {
		fmt.Println(err)
	}
	// Output: created true, queued
}
