package switchyard_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"

	switchyard "github.com/switchyard-dev/switchyard"
	"github.com/switchyard-dev/switchyard/config"
	"github.com/switchyard-dev/switchyard/internal/pgstore"
	"github.com/switchyard-dev/switchyard/internal/testenv"
)

// Migrate publishes the config's routes for the SQL function enqueue(),
// so that it works before any process has started: a route's settings,
// and a second Migrate with another config replaces them.
func TestMigratePublishesRoutes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := testenv.Schema(t)
	store := testenv.Store(t, schema)
	parse := func(routes string) *config.Config {
		cfg, err := config.Parse(fmt.Appendf(nil, "postgres: {schema: %s}\nqueues:\n  q: {concurrency: 1}\nroutes:\n%s", schema, routes), os.Getenv)
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	if _, err := switchyard.Migrate(ctx, parse("  - {topic: a, kind: k, queue: q, max_attempts: 3, ordered: true, target: {go: true}}\n")); err != nil {
		t.Fatal(err)
	}
	var route, policy string
	var attempts int
	if err := store.Pool().QueryRow(ctx, `SELECT route, max_attempts, lane_policy FROM routes WHERE queue = 'q' AND kind = 'k'`).
		Scan(&route, &attempts, &policy); err != nil || route != "a" || attempts != 3 || policy != "none" {
		t.Fatalf("published route %s, %d attempts, lane policy %q (%v)", route, attempts, policy, err)
	}
	if _, err := switchyard.Migrate(ctx, parse("  - {topic: b, kind: k2, queue: q, target: {go: true}}\n")); err != nil {
		t.Fatal(err)
	}
	var kinds string
	if err := store.Pool().QueryRow(ctx, `SELECT string_agg(kind, ',') FROM routes`).Scan(&kinds); err != nil || kinds != "k2" {
		t.Fatalf("routes after a second Migrate: %q (%v), want the new config's only", kinds, err)
	}
}

// A schema a newer build migrated is refused by Migrate with
// ErrSchemaNewer, which an embedder can tell from any other failure.
func TestMigrateRefusesANewerSchema(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := testenv.Schema(t)
	store := testenv.Store(t, schema)
	if _, err := store.Pool().Exec(ctx, `INSERT INTO schema_migrations (version, name) VALUES ($1, 'newer.sql')`, pgstore.LatestVersion()+1); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse(fmt.Appendf(nil, "postgres: {schema: %s}\nqueues:\n  q: {concurrency: 1}\nroutes:\n  - {topic: a, kind: k, queue: q, target: {go: true}}\n", schema), os.Getenv)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := switchyard.Migrate(ctx, cfg); !errors.Is(err, switchyard.ErrSchemaNewer) {
		t.Fatalf("Migrate of a newer schema: %v, want ErrSchemaNewer", err)
	}
}
