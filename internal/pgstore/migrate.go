package pgstore

import (
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/template"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// functionsTemplate is every function and trigger of the schema, applied
// after the migrations whenever it changed (see doc.go); functionsSQL is
// it rendered.
//
//go:embed functions.sql
var functionsTemplate string

var functionsSQL = renderFunctions()

func renderFunctions() string {
	t := template.Must(template.New("functions.sql").Funcs(template.FuncMap{"claim": claimSet}).Parse(functionsTemplate))
	var b strings.Builder
	if err := t.Execute(&b, nil); err != nil {
		panic(fmt.Sprintf("functions.sql: %v", err)) // the embedded file is ours: a test fails first
	}
	return b.String()
}

// functionsName is functions.sql's row in schema_functions.
const functionsName = "functions.sql"

// functionsHash identifies this binary's functions.sql.
func functionsHash() string {
	sum := sha256.Sum256([]byte(functionsSQL))
	return hex.EncodeToString(sum[:])
}

type migration struct {
	version int
	name    string
	sql     string
}

func migrations() ([]migration, error) {
	entries, err := fs.ReadDir(migrationFS, "migrations")
	if err != nil {
		return nil, err
	}
	var out []migration
	for _, e := range entries {
		num, _, ok := strings.Cut(e.Name(), "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil {
			return nil, fmt.Errorf("migration %q: name must start with a number and '_'", e.Name())
		}
		b, err := migrationFS.ReadFile("migrations/" + e.Name())
		if err != nil {
			return nil, err
		}
		out = append(out, migration{version: v, name: e.Name(), sql: string(b)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].version < out[j].version })
	return out, nil
}

// LatestVersion is the highest migration this binary knows.
func LatestVersion() int {
	ms, err := migrations()
	if err != nil || len(ms) == 0 {
		return 0
	}
	return ms[len(ms)-1].version
}

// Migrate creates the schema, applies every migration not yet applied,
// and then functions.sql if the schema's functions are not this binary's,
// in one transaction under an advisory lock keyed by the schema name, so
// that several processes may run it at once: the first applies, the rest
// wait on the lock and then find nothing to do. A table lock it cannot
// take within migrateLockTimeout makes it roll back and try again, and
// after migrateTries it returns ErrMigrateLocked, having changed nothing.
// It returns the names of what it applied.
func (s *Store) Migrate(ctx context.Context) ([]string, error) {
	return s.migrateTo(ctx, math.MaxInt)
}

// Migrate's waits for the locks of the tables it changes. A DDL statement
// that waits for a table's lock queues every later query of that table
// behind it, for as long as the holder keeps it: with a report or a
// pg_dump holding lanes for 15 s, every read of lanes took 13 s while
// switchyard migrate waited (0031 to 0033; a lanes read otherwise takes
// under a millisecond). So a migration waits at most migrateLockTimeout
// for a lock, then rolls back, which lets the queue through, and tries
// again after migrateRetryPause, migrateTries times in all (about 45 s):
// the fleet stalls 2 s at a time at worst, never for the holder's whole
// transaction. Variables for the tests only.
var (
	migrateLockTimeout = 2 * time.Second
	migrateTries       = 15
	migrateRetryPause  = time.Second
)

// ErrMigrateLocked is Migrate's error (errors.Is) when another
// transaction held a lock it needed through all its tries: it changed
// nothing, and a later run will apply it.
var ErrMigrateLocked = errors.New("another transaction held a lock that the migration needs")

// migrateTo is Migrate up to and including migration last; functions.sql
// only goes with the latest.
func (s *Store) migrateTo(ctx context.Context, last int) ([]string, error) {
	for try := 1; ; try++ {
		applied, err := s.migrateOnce(ctx, last)
		var pe *pgconn.PgError
		switch {
		case err == nil:
			return applied, nil
		case !errors.As(err, &pe) || pe.Code != "55P03": // lock_not_available: lock_timeout
			return nil, fmt.Errorf("migrate schema %s: %w", s.schema, err)
		case try == migrateTries:
			return nil, fmt.Errorf("migrate schema %s: %w (%d tries, each waiting %s): nothing was changed; "+
				"find the long transaction on the schema's tables (pg_stat_activity, pg_locks), then run migrate again: %w",
				s.schema, ErrMigrateLocked, try, migrateLockTimeout, err)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("migrate schema %s: %w: %w", s.schema, context.Cause(ctx), err)
		case <-time.After(migrateRetryPause):
		}
	}
}

// migrateOnce is one try of migrateTo, in one transaction.
func (s *Store) migrateOnce(ctx context.Context, last int) ([]string, error) {
	ms, err := migrations()
	if err != nil {
		return nil, err
	}
	ident := pgx.Identifier{s.schema}.Sanitize()
	var applied []string
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		// A migration may rightly run longer than the runtime's
		// statement_timeout (an index on a large table), and so may the
		// wait below for another migrate running one; the caller's ctx
		// (the Job's activeDeadlineSeconds) bounds them instead.
		if _, err := tx.Exec(ctx, `SET LOCAL statement_timeout = 0`); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('switchyard.migrate:' || $1, 0))`, s.schema); err != nil {
			return err
		}
		// After the advisory lock: waiting for another migrate holds no
		// table's queue up.
		if _, err := tx.Exec(ctx, fmt.Sprintf(`SET LOCAL lock_timeout = %d`, migrateLockTimeout.Milliseconds())); err != nil {
			return err
		}
		// The schema name is allow-listed by ValidSchema and quoted here;
		// DDL cannot take it as a parameter.
		if _, err := tx.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS `+ident); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `SET LOCAL search_path TO `+ident); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
			version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
			return err
		}
		done := map[int]bool{}
		rows, err := tx.Query(ctx, `SELECT version FROM schema_migrations`)
		if err != nil {
			return err
		}
		vs, err := pgx.CollectRows(rows, pgx.RowTo[int])
		if err != nil {
			return err
		}
		latest := LatestVersion()
		for _, v := range vs {
			done[v] = true
			if v > latest {
				return &NewerSchemaError{At: slices.Max(vs), Latest: latest}
			}
		}
		for _, m := range ms {
			if done[m.version] || m.version > last {
				continue
			}
			if _, err := tx.Exec(ctx, m.sql); err != nil {
				return fmt.Errorf("migration %s: %w", m.name, err)
			}
			if _, err := tx.Exec(ctx, `INSERT INTO schema_migrations (version, name) VALUES ($1, $2)`, m.version, m.name); err != nil {
				return err
			}
			applied = append(applied, m.name)
		}
		if last < latest {
			return nil
		}
		if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_functions (
			name text PRIMARY KEY, sha256 text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
			return err
		}
		var have string
		err = tx.QueryRow(ctx, `SELECT sha256 FROM schema_functions WHERE name = $1`, functionsName).Scan(&have)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		if want := functionsHash(); have != want {
			if _, err := tx.Exec(ctx, functionsSQL); err != nil {
				return fmt.Errorf("%s: %w", functionsName, err)
			}
			if _, err := tx.Exec(ctx, `INSERT INTO schema_functions (name, sha256) VALUES ($1, $2)
				ON CONFLICT (name) DO UPDATE SET sha256 = excluded.sha256, applied_at = now()`, functionsName, want); err != nil {
				return err
			}
			applied = append(applied, functionsName)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return applied, nil
}

// NewerSchemaError is Migrate's refusal of a schema that a newer binary
// migrated: it holds migrations this binary does not know, and putting
// this binary's functions back over it would run its tables with
// functions older than they are. An older build's migrate — a restarted
// pod of the previous release, a rollback — must not touch it.
// (Migrate's error names the schema around it.) It is ErrNewerSchema.
type NewerSchemaError struct{ At, Latest int }

// ErrNewerSchema is what every NewerSchemaError is (errors.Is).
var ErrNewerSchema = errors.New("the schema is newer than this binary")

func (e *NewerSchemaError) Is(target error) bool { return target == ErrNewerSchema }

func (e *NewerSchemaError) Error() string {
	return fmt.Sprintf("at migration %d, newer than this binary's %d: this one would put its older functions back; %s",
		e.At, e.Latest, newerSchemaCure)
}

// newerSchemaCure is what an operator of an older binary on a newer schema
// can do, for Migrate's refusal and SchemaCheck alike: during a rollout
// the first (the old processes are being replaced); for a rollback the
// second, since no migration goes down.
const newerSchemaCure = "run the switchyard that migrated it, or, to roll back, restore the database from before that migrate (migrations do not go down)"

// SchemaVersion returns the highest applied migration, 0 when none.
func (s *Store) SchemaVersion(ctx context.Context) (int, error) {
	var v int
	err := s.pool.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM schema_migrations`).Scan(&v)
	if isUndefinedTable(err) {
		return 0, nil // no table yet means nothing applied
	}
	return v, err
}

// SchemaCheck says what keeps the schema from being this binary's, and
// the cure: "" when it is, else e.g. "at 7, want 8: run `switchyard
// migrate` first" or "at 9, newer than this binary's 8: ..." (this binary
// is the one to replace, or the database to restore).
func (s *Store) SchemaCheck(ctx context.Context) (string, error) {
	const cure = ": run `switchyard migrate` first"
	v, err := s.SchemaVersion(ctx)
	if err != nil {
		return "", err
	}
	if want := LatestVersion(); v > want {
		return fmt.Sprintf("at %d, newer than this binary's %d: %s", v, want, newerSchemaCure), nil
	} else if v != want {
		return fmt.Sprintf("at %d, want %d%s", v, want, cure), nil
	}
	var have string
	err = s.pool.QueryRow(ctx, `SELECT sha256 FROM schema_functions WHERE name = $1`, functionsName).Scan(&have)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) && !isUndefinedTable(err) {
		return "", err
	}
	if have != functionsHash() {
		return "functions out of date" + cure, nil
	}
	return "", nil
}

// RequireCurrent is SchemaCheck as the error that every user of the
// schema (a process, the Go client, a CLI verb) gives before it reads or
// writes, rather than a missing table's SQL error: nil when the schema
// is this binary's.
func (s *Store) RequireCurrent(ctx context.Context) error {
	problem, err := s.SchemaCheck(ctx)
	if err != nil {
		return fmt.Errorf("postgres: read schema version: %w", err)
	}
	if problem != "" {
		return fmt.Errorf("postgres: schema %q is not this binary's: %s", s.schema, problem)
	}
	return nil
}

func isUndefinedTable(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "42P01"
}

// DropSchema removes the schema and everything in it (tests, bench).
func (s *Store) DropSchema(ctx context.Context) error {
	_, err := s.pool.Exec(ctx, `DROP SCHEMA IF EXISTS `+pgx.Identifier{s.schema}.Sanitize()+` CASCADE`)
	return err
}

// GrantRuntime gives role exactly what `switchyard run` needs: DML on the
// schema's tables, use of its sequences and functions, and nothing that
// changes the schema. Run it as the migration role after Migrate (again
// after each upgrade, so new tables are covered).
func (s *Store) GrantRuntime(ctx context.Context, role string) error {
	if !ValidSchema(role) {
		return fmt.Errorf("role %q: want a lower-case identifier ([a-z_][a-z0-9_]*)", role)
	}
	schema, r := pgx.Identifier{s.schema}.Sanitize(), pgx.Identifier{role}.Sanitize()
	// Identifiers are allow-listed above and quoted; GRANT takes no
	// parameters.
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		for _, stmt := range []string{
			`GRANT USAGE ON SCHEMA ` + schema + ` TO ` + r,
			`GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA ` + schema + ` TO ` + r,
			`GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA ` + schema + ` TO ` + r,
			`GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA ` + schema + ` TO ` + r,
		} {
			if _, err := tx.Exec(ctx, stmt); err != nil {
				return fmt.Errorf("grant runtime privileges to %s: %w", role, err)
			}
		}
		return nil
	})
}
