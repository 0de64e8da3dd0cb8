package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

type noopArgs struct {
	N    int    `json:"n"`
	Note string `json:"note"`
}

func (noopArgs) Kind() string { return "noop" }

type noopWorker struct{ river.WorkerDefaults[noopArgs] }

func (noopWorker) Work(context.Context, *river.Job[noopArgs]) error { return nil }

// runRiver is the burn-down on River: one client, MaxWorkers
// -concurrency on the default queue, the fetch settings of River's own
// benchmark (a 2 ms cooldown, a 20 ms poll: at its defaults it fetches
// far less often and the figure is a tenth of this).
func runRiver(ctx context.Context, c config) (map[string]float64, error) {
	schema := schemaName("peers_river")
	pc, err := pgxpool.ParseConfig(c.databaseURL)
	if err != nil {
		return nil, fmt.Errorf("SWITCHYARD_DATABASE_URL: %w", err)
	}
	pc.MaxConns = int32(c.maxConns)
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, `CREATE SCHEMA `+pgx.Identifier{schema}.Sanitize()); err != nil {
		return nil, err
	}
	defer func() {
		_, _ = pool.Exec(context.WithoutCancel(ctx), `DROP SCHEMA `+pgx.Identifier{schema}.Sanitize()+` CASCADE`)
	}()
	driver := riverpgxv5.New(pool)
	migrator, err := rivermigrate.New(driver, &rivermigrate.Config{Schema: schema, Logger: quietLog()})
	if err != nil {
		return nil, err
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return nil, fmt.Errorf("migrate: %w", err)
	}
	workers := river.NewWorkers()
	river.AddWorker(workers, noopWorker{})
	client, err := river.NewClient(driver, &river.Config{
		Schema:            schema,
		Logger:            quietLog(),
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: c.concurrency}},
		Workers:           workers,
		FetchCooldown:     2 * time.Millisecond,
		FetchPollInterval: 20 * time.Millisecond,
	})
	if err != nil {
		return nil, err
	}

	const batch = 5000
	pad := note(c.payload)
	start := time.Now()
	for i := 0; i < c.jobs; i += batch {
		params := make([]river.InsertManyParams, 0, batch)
		for j := i; j < min(i+batch, c.jobs); j++ {
			params = append(params, river.InsertManyParams{Args: noopArgs{N: j, Note: pad}})
		}
		if _, err := client.InsertManyFast(ctx, params); err != nil {
			return nil, fmt.Errorf("insert: %w", err)
		}
	}
	insert := float64(c.jobs) / time.Since(start).Seconds()
	table := pgx.Identifier{schema, "river_job"}.Sanitize()
	if _, err := pool.Exec(ctx, `ANALYZE `+table); err != nil {
		return nil, err
	}

	// Completions are counted from River's events (in-process, so the
	// count costs the database nothing), then confirmed in the table.
	events, cancelEvents := client.SubscribeConfig(&river.SubscribeConfig{
		ChanSize: c.jobs, Kinds: []river.EventKind{river.EventKindJobCompleted}})
	defer cancelEvents()
	start = time.Now()
	if err := client.Start(ctx); err != nil {
		return nil, err
	}
	for done := 0; done < c.jobs; done++ {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-events:
		}
	}
	// River keeps completed jobs (for a day by default): drained is every
	// row completed, as its batched completer has written them.
	for {
		var left int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM `+table+` WHERE state <> 'completed'`).Scan(&left); err != nil {
			return nil, err
		}
		if left == 0 {
			break
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
	work := float64(c.jobs) / time.Since(start).Seconds()
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := client.Stop(stopCtx); err != nil {
		return nil, fmt.Errorf("stop: %w", err)
	}
	return map[string]float64{"river_jobs_per_s": work, "river_insert_jobs_per_s": insert}, nil
}

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// schemaName is a fresh schema name with the given prefix.
func schemaName(prefix string) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return prefix + "_" + hex.EncodeToString(b)
}
