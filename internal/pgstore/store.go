package pgstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

var (
	// ErrNotFound is returned when a job or DLQ entry does not exist.
	ErrNotFound = errors.New("not found")
	// ErrOffsetFenced means the stored offset of a partition moved under
	// us: another consumer processed that range (we are a zombie after a
	// rebalance). The batch was rolled back; re-seek to the stored offsets.
	ErrOffsetFenced = errors.New("stored offset moved: another consumer owns this partition")
	// ErrConflict is returned when a state transition is not allowed from
	// the row's current state (e.g. re-driving a DLQ entry twice).
	ErrConflict = errors.New("conflict")
)

var schemaPattern = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// defaultConnectTimeout bounds a connection attempt when the URL sets no
// connect_timeout.
const defaultConnectTimeout = 5 * time.Second

// ValidSchema reports whether name is an allowed schema identifier.
func ValidSchema(name string) bool { return schemaPattern.MatchString(name) }

// Store wraps a pool whose connections use the Switchyard schema.
type Store struct {
	pool   *pgxpool.Pool
	schema string

	cursorMu     sync.Mutex
	groupCursors map[string]string // see groupCursor

	ingestCareful atomic.Bool // the last batch needed IngestCommit's careful path
	splits        bool        // the pool is large enough for IngestSplit's two connections

	depthMu    sync.Mutex
	depth      depthCount                             // QueueStats' last count of the jobs by state
	depthReuse func(took time.Duration) time.Duration // how long a count that took so long is reused
}

// Config opens a Store.
type Config struct {
	// URL is a libpq URL or DSN (TLS modes pass through it).
	URL string
	// Schema holds the tables. Required: its default is the config's
	// (postgres.schema), applied there only.
	Schema string
	// MaxConns caps the pool. Required (positive).
	MaxConns int32
	// StatementTimeoutMS is every connection's statement_timeout, in
	// milliseconds. Defaults to 60000 (60s); it bounds a stuck query,
	// never a job (jobs run outside transactions).
	StatementTimeoutMS int
}

// Open connects and checks the server answers. It does not migrate.
func Open(ctx context.Context, cfg Config) (*Store, error) { return open(ctx, cfg, nil) }

// open is Open with extra settings for every connection (tests).
func open(ctx context.Context, cfg Config, settings map[string]string) (*Store, error) {
	if !ValidSchema(cfg.Schema) {
		return nil, fmt.Errorf("postgres.schema: %q is not a valid schema name", cfg.Schema)
	}
	if cfg.MaxConns <= 0 {
		return nil, fmt.Errorf("postgres.max_conns: %d is not positive", cfg.MaxConns)
	}
	if cfg.StatementTimeoutMS == 0 {
		cfg.StatementTimeoutMS = 60_000
	}
	pc, err := pgxpool.ParseConfig(cfg.URL)
	if err != nil {
		// pgx's parse error can echo the URL, password included;
		// config.CheckPostgresURL says what is wrong without it.
		return nil, errors.New("postgres.url: invalid connection string")
	}
	if pc.ConnConfig.ConnectTimeout == 0 {
		// Without one, a connection to an unreachable host waits for the
		// kernel's TCP timeout (minutes) and every request with it.
		pc.ConnConfig.ConnectTimeout = defaultConnectTimeout
	}
	pc.MaxConns = cfg.MaxConns
	rp := pc.ConnConfig.RuntimeParams
	rp["search_path"] = cfg.Schema
	rp["application_name"] = "switchyard"
	rp["statement_timeout"] = fmt.Sprint(cfg.StatementTimeoutMS)
	rp["idle_in_transaction_session_timeout"] = "60000"
	// No JIT compilation, unless the URL asks for it (?jit=on). Postgres
	// compiles a statement whose plan costs more than jit_above_cost at
	// every execution, and a claim's generic plan is costed as a walk of
	// the whole claim index (it cannot know its LIMIT will stop early):
	// past about 600,000 runnable jobs in a queue, every claim compiled
	// 23 functions, a sixth of the database's CPU in LLVM (perf). bench
	// --only work --jobs 600000, in turn: 36.9k and 43.5k jobs/s with it,
	// 48.7k and 47.4k without, as fast as with 200,000 jobs
	// (docs/performance.md). Nothing Switchyard runs is long enough to
	// win the compilation back.
	if _, set := rp["jit"]; !set {
		rp["jit"] = "off"
	}
	for k, v := range settings {
		rp[k] = v
	}
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", redact(err))
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("postgres: %w", redact(err))
	}
	return &Store{pool: pool, schema: cfg.Schema, depthReuse: depthReuse, splits: cfg.MaxConns >= splitMinConns}, nil
}

// Unavailable reports whether err means the database cannot be reached
// or cannot take work now (a failed connection, a server shutting down or
// out of connections, a statement cut off by statement_timeout), as
// opposed to a mistake in the request: the caller may retry later.
func Unavailable(err error) bool {
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) || pgconn.SafeToRetry(err) {
		return true
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return strings.HasPrefix(pe.Code, "08") || slices.Contains([]string{"53300", "57014", "57P01", "57P02", "57P03"}, pe.Code)
	}
	var ne net.Error
	return errors.As(err, &ne) || errors.Is(err, io.ErrUnexpectedEOF)
}

// Close closes the pool.
func (s *Store) Close() { s.pool.Close() }

// Pool exposes the pool to embedders that want to write their own
// tables in the same database (Applier's conditional writes).
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// Ping checks the database answers.
func (s *Store) Ping(ctx context.Context) error { return redact(s.pool.Ping(ctx)) }

// redact keeps connection errors from carrying the password: pgconn's
// ConnectError includes the config, whose String hides nothing we care
// about, but wrapped errors from the URL parser can contain the raw URL.
func redact(err error) error {
	if err == nil {
		return nil
	}
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) {
		return connectError{ce.Unwrap()}
	}
	return err
}

// connectError is a failed connect's reasons, one per dial: each said
// once, since sslmode=prefer (the default) dials twice, with TLS and
// without, and a refused port refuses both alike.
type connectError struct{ err error }

func (e connectError) Error() string {
	var seen []string
	for _, line := range strings.Split(e.err.Error(), "\n") {
		if !slices.Contains(seen, line) {
			seen = append(seen, line)
		}
	}
	return "cannot connect: " + strings.Join(seen, "; ")
}

func (e connectError) Unwrap() error { return e.err }

func notFound(err error) error {
	if errors.Is(err, pgx.ErrNoRows) {
		return ErrNotFound
	}
	return err
}

// Notices are what Listen hands on, each from its own channel.
type Notices struct {
	// Wake: a queue has new runnable jobs (Channel).
	Wake func(queue string)
	// Cancel: an operator cancelled a job that was running
	// (CancelChannel).
	Cancel func(id int64)
	// Listening: LISTEN is in place, at the start or again after a lost
	// connection. What was sent meanwhile is lost: look again.
	Listening func()
}

// CancelChannel is the LISTEN/NOTIFY channel that announces cancelled
// running jobs; the payload is the job's id. Per schema, as Channel.
func (s *Store) CancelChannel() string { return s.schema + "_cancel" }

// Listen listens on Channel and CancelChannel until ctx ends or the
// connection fails, handing each notification to n.
func (s *Store) Listen(ctx context.Context, n Notices) error {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	// The connection ends in LISTEN state; it never goes back to the pool.
	pc := conn.Hijack()
	defer pc.Close(context.Background())
	for _, ch := range []string{s.Channel(), s.CancelChannel()} {
		if _, err := pc.Exec(ctx, `LISTEN `+pgx.Identifier{ch}.Sanitize()); err != nil {
			return err
		}
	}
	if n.Listening != nil {
		n.Listening()
	}
	for {
		note, err := pc.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		switch note.Channel {
		case s.Channel():
			n.Wake(note.Payload)
		case s.CancelChannel():
			if id, err := strconv.ParseInt(note.Payload, 10, 64); err == nil && n.Cancel != nil {
				n.Cancel(id)
			}
		}
	}
}
