package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/switchyard-dev/switchyard/internal/pgstore"
	"github.com/switchyard-dev/switchyard/internal/testenv"
)

// A schema that a newer binary migrated (here, one migration past this
// binary's latest and functions of its own) is refused by this binary's
// Migrate, which leaves it as it was — it would have put its older
// functions back under the newer fleet — and SchemaCheck says which
// binary is the one to replace.
func TestMigrateLeavesANewerSchemaAlone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := testenv.MigratedStore(t)
	newer := pgstore.LatestVersion() + 1
	if _, err := s.Pool().Exec(ctx, `INSERT INTO schema_migrations (version, name) VALUES ($1, 'from_a_newer_binary.sql')`, newer); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Pool().Exec(ctx, `UPDATE schema_functions SET sha256 = 'newer'`); err != nil {
		t.Fatal(err)
	}
	_, err := s.Migrate(ctx)
	var ns *pgstore.NewerSchemaError
	if !errors.As(err, &ns) || ns.At != newer || ns.Latest != pgstore.LatestVersion() {
		t.Fatalf("Migrate of a newer schema: %v, want a NewerSchemaError at %d", err, newer)
	}
	if n := testenv.Count(t, s, `SELECT count(*) FROM schema_functions WHERE sha256 = 'newer'`); n != 1 {
		t.Fatalf("the refused Migrate replaced the newer binary's functions")
	}
	problem, err := s.SchemaCheck(ctx)
	if err != nil || !strings.Contains(problem, "newer than this binary's") || strings.Contains(problem, "switchyard migrate") {
		t.Fatalf("SchemaCheck of a newer schema: %q (%v), want it named newer, with no migrate to run", problem, err)
	}
}

// functionsRecord is the migration that the current functions.sql came
// with, and the file's hash: TestFunctionsChangeWithAMigration.
const functionsRecord = "testdata/functions.sha256"

// Migrate refuses a newer schema by its migrations (above): a
// functions.sql that changed without one would be put back by an older
// binary of the same migration, under the newer fleet. So a change to the
// file comes with a migration — a comment alone will do — and its hash is
// recorded beside that migration's number here.
func TestFunctionsChangeWithAMigration(t *testing.T) {
	b, err := os.ReadFile(functionsRecord)
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("%d %s", pgstore.LatestVersion(), pgstore.FunctionsHash())
	got := strings.TrimSpace(string(b))
	switch version, _, _ := strings.Cut(got, " "); {
	case got == want:
	case version == strconv.Itoa(pgstore.LatestVersion()):
		t.Fatalf("functions.sql changed without a migration: add migrations/%04d_<what>.sql (a comment is enough), "+
			"so that an older binary's migrate refuses the schema, then write %q to %s", pgstore.LatestVersion()+1, "<its number> <hash>", functionsRecord)
	default:
		t.Fatalf("a new migration: write %q to %s", want, functionsRecord)
	}
}

// A migration that waits for a table's lock puts every later query of
// that table in the queue behind it: a report or a pg_dump holding lanes
// for 15 s held every read of lanes 13 s while migrate waited (measured
// with switchyard migrate, 0031 to 0033). So Migrate waits only so long,
// rolls back, lets the queue through, and tries again; after its last try
// it says what held it up and changes nothing. Here a transaction that
// wrote jobs and has not committed holds the lock that functions.sql's
// trigger needs.
func TestMigrateDoesNotQueueTrafficBehindALock(t *testing.T) {
	defer pgstore.SetMigrateWaits(200*time.Millisecond, 3, 50*time.Millisecond)()
	ctx := context.Background()
	s := testenv.MigratedStore(t)
	if _, err := s.Pool().Exec(ctx, `UPDATE schema_functions SET sha256 = 'older'`); err != nil {
		t.Fatal(err)
	}
	holder, err := s.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback(ctx)
	if _, err := holder.Exec(ctx, `LOCK TABLE jobs IN ROW EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}

	mctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	migrated := make(chan error, 1)
	go func() { _, err := s.Migrate(mctx); migrated <- err }()
	testenv.WaitBlockedBy(t, s, holder, "migrate to wait for the lock on jobs")
	// A writer that comes after: it must not wait for the holder.
	wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
	defer wcancel()
	err = pgx.BeginFunc(wctx, s.Pool(), func(tx pgx.Tx) error {
		_, err := tx.Exec(wctx, `LOCK TABLE jobs IN ROW EXCLUSIVE MODE`)
		return err
	})
	if err != nil {
		t.Errorf("a writer of jobs behind the waiting migrate: %v, want it through once migrate gives up its wait", err)
	}

	err = <-migrated
	if !errors.Is(err, pgstore.ErrMigrateLocked) || !strings.Contains(err.Error(), "functions.sql") ||
		!strings.Contains(err.Error(), "run migrate again") {
		t.Fatalf("Migrate held up by a lock: %v, want ErrMigrateLocked naming functions.sql and what to do", err)
	}
	if n := testenv.Count(t, s, `SELECT count(*) FROM schema_functions WHERE sha256 = 'older'`); n != 1 {
		t.Fatalf("the Migrate that gave up changed schema_functions")
	}
	if err := holder.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if applied, err := s.Migrate(ctx); err != nil || fmt.Sprint(applied) != "[functions.sql]" {
		t.Fatalf("Migrate once the lock is free: %v, %v; want functions.sql applied", applied, err)
	}
}

// A migration may rightly run longer than the runtime's statement_timeout
// (an index on a large jobs table), and a second migrate waits for the
// first (the advisory lock) as long as it runs: neither is cut off at
// postgres' statement_timeout (60 s by default; here 300 ms).
func TestMigrateOutlastsStatementTimeout(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := testenv.Name("t")
	s, err := pgstore.Open(ctx, pgstore.Config{URL: testenv.DatabaseURL(t), Schema: schema, MaxConns: 4, StatementTimeoutMS: 300})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.DropSchema(context.Background()); err != nil {
			t.Logf("drop schema %s: %v", schema, err)
		}
		s.Close()
	})
	// Another migrate of this schema, still running after a second.
	first, err := s.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Rollback(ctx)
	if _, err := first.Exec(ctx, `SET LOCAL statement_timeout = 0`); err != nil {
		t.Fatal(err)
	}
	if _, err := first.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('switchyard.migrate:' || $1, 0))`, schema); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := s.Migrate(ctx); done <- err }()
	testenv.WaitBlockedBy(t, s, first, "the second migrate to wait for the first")
	// The first runs on past the second's statement_timeout.
	if _, err := first.Exec(ctx, `SELECT pg_sleep(1)`); err != nil {
		t.Fatal(err)
	}
	if err := first.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("Migrate behind a migrate that ran past statement_timeout: %v", err)
	}
}
