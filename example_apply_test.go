package switchyard_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/jackc/pgx/v5"

	switchyard "github.com/switchyard-dev/switchyard"
	"github.com/switchyard-dev/switchyard/config"
	"github.com/switchyard-dev/switchyard/workers"
)

// A handler keeps its own table of customers and applies each record's
// version in the same transaction as the job's completion. Versions 3 and
// then 2 arrive for one customer: 3 is applied, 2 is stale and never runs
// fn, so the table can never go back in time — not even across crashes
// and retries. It uses public packages only, so it can be copied out of
// this module.
func ExampleApplier_Apply() {
	suffix := time.Now().UnixNano() // a topic and schema of the example's own
	topic, schema := fmt.Sprintf("customers_%d", suffix), fmt.Sprintf("example_%d", suffix)
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
	applier := eng.Applier() // before Start, for the handler to hold
	done := make(chan struct{}, 2)
	_ = eng.Register("customer.sync", workers.HandlerFunc(func(ctx context.Context, job *workers.Job) error {
		defer func() { done <- struct{}{} }()
		err := applier.Apply(ctx, job, func(ctx context.Context, tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `INSERT INTO customers (id, seq) VALUES ($1, $2)
				ON CONFLICT (id) DO UPDATE SET seq = excluded.seq`, job.Key, *job.Version)
			return err
		})
		if errors.Is(err, switchyard.ErrStale) {
			return nil // an older version: nothing to do, nothing to retry
		}
		return err
	}))

	ctx := context.Background()
	db := setUp(cfg)
	defer tearDown(db, schema)
	if err := eng.Start(ctx); err != nil {
		fmt.Println(err)
		return
	}
	defer eng.Stop(ctx) //nolint:errcheck

	produce(cfg, topic, `{"id":"c-1","seq":3}`)
	<-done
	produce(cfg, topic, `{"id":"c-1","seq":2}`)
	waitForState(db, schema, "skipped")

	var seq int64
	_ = db.QueryRow(ctx, `SELECT seq FROM `+pgx.Identifier{schema, "customers"}.Sanitize()+` WHERE id = 'c-1'`).Scan(&seq)
	fmt.Println("customer c-1 at version", seq)
	// Output: customer c-1 at version 3
}

// setUp migrates the example's schema and creates the handler's table in
// it: Apply's transaction runs on the engine's connections, whose
// search_path is Switchyard's schema.
func setUp(cfg *config.Config) *pgx.Conn {
	ctx := context.Background()
	if _, err := switchyard.Migrate(ctx, cfg); err != nil {
		panic(err)
	}
	db, err := pgx.Connect(ctx, cfg.Postgres.URL)
	if err != nil {
		panic(err)
	}
	table := pgx.Identifier{cfg.Postgres.Schema, "customers"}.Sanitize()
	if _, err := db.Exec(ctx, `CREATE TABLE `+table+` (id text PRIMARY KEY, seq bigint NOT NULL)`); err != nil {
		panic(err)
	}
	return db
}

func tearDown(db *pgx.Conn, schema string) {
	_, _ = db.Exec(context.Background(), `DROP SCHEMA `+pgx.Identifier{schema}.Sanitize()+` CASCADE`)
	_ = db.Close(context.Background())
}

func waitForState(db *pgx.Conn, schema, state string) {
	jobs := pgx.Identifier{schema, "jobs"}.Sanitize()
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		var n int
		_ = db.QueryRow(context.Background(), `SELECT count(*) FROM `+jobs+` WHERE state = $1`, state).Scan(&n)
		if n > 0 {
			return
		}
	}
}
