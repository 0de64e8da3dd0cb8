package pgstore_test

import (
	"context"
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/switchyard-dev/switchyard/internal/pgstore"
	"github.com/switchyard-dev/switchyard/internal/testenv"
)

// The batches that complete, heartbeat and release leases join their ids
// to jobs, and run after planSQL in their transaction. With statistics
// taken while nothing ran, the planner read the batch through the partial
// index of running rows and compared every running row with every id
// (26 ms per batch of 100 in the ordered benchmark); with those of a
// near-empty table, as a new deployment's are until autovacuum's first
// ANALYZE, it read all of jobs for every batch (a completion of five jobs
// took 1.4 ms at 10,000 jobs in bench --only e2e, and longer as the table
// grew), locking rows in physical order rather than the id order that
// keeps two batches from deadlocking. Their generic plans must join by
// primary key whatever the statistics say.
func TestBatchStatementsJoinByPrimaryKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, analyzedAt := range []int{0, 2000} { // queued jobs when ANALYZE ran, nothing running
		t.Run(fmt.Sprintf("statistics of %d jobs", analyzedAt), func(t *testing.T) {
			t.Parallel()
			s := testenv.MigratedStore(t)
			if analyzedAt == 0 {
				if _, err := s.Pool().Exec(ctx, `ANALYZE jobs`); err != nil {
					t.Fatal(err)
				}
			}
			conn := queuedJobs(ctx, t, s, 2000)
			if analyzedAt > 0 {
				if _, err := conn.Exec(ctx, `ANALYZE jobs`); err != nil {
					t.Fatal(err)
				}
			}
			jobs, _, err := s.JobClaim(ctx, pgstore.JobClaimParams{Queue: "q", Limit: 500, Lease: time.Minute, MaxRuntime: time.Hour})
			if err != nil || len(jobs) != 500 {
				t.Fatalf("claim: %d, %v", len(jobs), err)
			}
			var ids, tokens []string
			for _, j := range jobs[:100] {
				ids, tokens = append(ids, fmt.Sprint(j.ID)), append(tokens, fmt.Sprint(j.Token))
			}
			idArr := fmt.Sprintf("'{%s}'::bigint[]", strings.Join(ids, ","))
			tokArr := fmt.Sprintf("'{%s}'::bigint[]", strings.Join(tokens, ","))
			for i, c := range []struct {
				name, sql, args string
			}{
				{"complete", pgstore.CompleteSQL, idArr + ", " + tokArr + ", '{}'::text[], '{}'::text[], '{}'::text[], '{}'::bigint[], '{}'::bytea[], '{}'::text[], '{}'::text[], '{}'::bigint[]"},
				{"heartbeat", pgstore.HeartbeatSQL, idArr + ", " + tokArr + ", 60000, 3600000, ''"},
				{"restart", pgstore.RestartSQL, idArr + ", " + tokArr + ", 60000, 3600000, ''"},
				{"release", pgstore.ReleaseSQL, idArr + ", " + tokArr},
				{"held", pgstore.UpdateHeldSQL("started_at = now()"), ids[0] + ", " + tokens[0]},
				{"cancelled", pgstore.CancelledSQL, idArr + ", " + tokArr},
			} {
				p := plannedPlan(ctx, t, conn, fmt.Sprintf("p%d", i), c.sql, c.args)
				if !strings.Contains(p, "jobs_pkey") || strings.Contains(p, "Seq Scan on jobs") {
					t.Errorf("%s does not join by primary key:\n%s", c.name, p)
				}
			}
			// A bulk action's chunk reads its jobs and entries by primary
			// key, whatever the statistics: unanalyzed, a chunk of
			// entries read every entry.
			for i, c := range []struct{ name, sql string }{
				{"bulk cancel", pgstore.JobsCancelSQL},
				{"bulk cancel of lanes' waiting jobs", pgstore.LanesWaitingCancelSQL},
				{"bulk re-drive", pgstore.DLQRedriveManySQL},
				{"bulk discard", pgstore.DLQDiscardManySQL},
			} {
				p := plannedPlan(ctx, t, conn, fmt.Sprintf("b%d", i), c.sql, idArr+", 'test'")
				if !strings.Contains(p, "_pkey") || strings.Contains(p, "Seq Scan") || len(walks(p)) > 0 {
					t.Errorf("%s does not read by primary key:\n%s", c.name, p)
				}
			}
			// A bulk re-drive's records: their entries by primary key,
			// their jobs' ids by the dedupe index (without planSQL, the
			// lookup read all of job_keys at these statistics).
			for i, c := range []struct{ name, sql, args, index string }{
				{"the records' entries", pgstore.DLQRecordsSQL, idArr + ", 4194304", "dlq_entries_pkey"},
				{"the records' entries locked", pgstore.LockRecordEntriesSQL, idArr, "dlq_entries_pkey"},
				{"the records' jobs", pgstore.RecordJobIDsSQL, "'{r,r}'::text[], '{kafka,kafka}'::text[], '{1,2}'::text[]", "job_keys_dedupe_idx"},
			} {
				p := plannedPlan(ctx, t, conn, fmt.Sprintf("r%d", i), c.sql, c.args)
				if !strings.Contains(p, c.index) || strings.Contains(p, "Seq Scan") || len(walks(p)) > 0 {
					t.Errorf("%s not read by %s:\n%s", c.name, c.index, p)
				}
			}
		})
	}
}

// walks are the index scans of plan that read their whole index: no
// Index Cond among their details (the lines under them, up to the next
// node).
func walks(plan string) []string {
	var found []string
	lines := strings.Split(plan, "\n")
	for i, l := range lines {
		if !strings.Contains(l, "Index Scan using") && !strings.Contains(l, "Index Only Scan using") {
			continue
		}
		cond := false
		for _, d := range lines[i+1:] {
			d = strings.TrimSpace(d)
			if strings.HasPrefix(d, "->") || strings.HasPrefix(d, "CTE ") || strings.HasPrefix(d, "SubPlan") || strings.HasPrefix(d, "InitPlan") {
				break
			}
			cond = cond || strings.HasPrefix(d, "Index Cond:")
		}
		if !cond {
			found = append(found, strings.TrimSpace(l))
		}
	}
	return found
}

// plannedPlan returns the plan that sql, prepared as name, runs with args
// after planSQL, in a transaction of conn that it rolls back.
func plannedPlan(ctx context.Context, t *testing.T, conn *pgxpool.Conn, name, sql, args string) string {
	t.Helper()
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	if _, err := tx.Exec(ctx, pgstore.PlanSQL); err != nil {
		t.Fatal(err)
	}
	return preparedPlan(ctx, t, tx, name, sql, args)
}

// queuedJobs ingests n queued jobs of queue q (keys and dedupe keys
// 0..n-1) and returns a connection of s, released when the test ends.
func queuedJobs(ctx context.Context, t *testing.T, s *pgstore.Store, n int) *pgxpool.Conn {
	t.Helper()
	var batch pgstore.IngestBatch
	for i := range n {
		batch.Jobs = append(batch.Jobs, pgstore.NewJob{Route: "r", Kind: "k", Queue: "q", Key: fmt.Sprint(i),
			DedupeKey: fmt.Sprint(i), Payload: []byte("{}"), MaxAttempts: 3, Topic: "t", Offset: int64(i)})
	}
	if _, err := s.IngestCommit(ctx, batch); err != nil {
		t.Fatal(err)
	}
	conn, err := s.Pool().Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Release)
	return conn
}

// preparedPlan prepares sql as name on conn and returns the plan of its
// execution with args (with plan_cache_mode = force_generic_plan set on
// conn, the generic plan a pool's repeated statement gets).
func preparedPlan(ctx context.Context, t *testing.T, conn querier, name, sql, args string) string {
	t.Helper()
	if _, err := conn.Exec(ctx, "PREPARE "+name+" AS "+sql); err != nil {
		t.Fatalf("%s: prepare: %v", name, err)
	}
	rows, err := conn.Query(ctx, "EXPLAIN EXECUTE "+name+"("+args+")")
	if err != nil {
		t.Fatalf("%s: explain: %v", name, err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatalf("%s: explain: %v", name, err)
	}
	return strings.Join(lines, "\n")
}

// querier is a connection or a transaction.
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// A claim runs after pgstore's claimPlanSQL, which makes its plan once per
// connection (generic) and leaves only the ordered walk of a claim index
// to choose. Without it, the generic plan follows the statistics: on
// those of an empty table, or of a route filter that they say removes
// every row, it is a sequential (or bitmap) scan of every runnable job
// and a sort, on every claim until the next ANALYZE.
func TestClaimPlanWalksTheClaimIndex(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, c := range []struct {
		name  string
		jobs  int // queued jobs of route r when the statistics are taken
		sql   string
		args  string
		index string
	}{
		{"unlimited, empty table", 0, pgstore.ClaimUnlimitedSQL, "'q', 50, 60000, 60000, '-infinity', 0, '{}'", "jobs_runnable_idx"},
		{"unlimited, routes filtered", 2000, pgstore.ClaimUnlimitedSQL, "'q', 50, 60000, 60000, '-infinity', 0, '{x}'", "jobs_runnable_idx"},
		{"capped, empty table", 0, pgstore.ClaimCappedSQL, "'q', 50, 60000, 60000, 'r', '-infinity', 0", "jobs_group_order_idx"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s := testenv.MigratedStore(t)
			var conn *pgxpool.Conn
			if c.jobs > 0 {
				conn = queuedJobs(ctx, t, s, c.jobs)
			} else {
				var err error
				if conn, err = s.Pool().Acquire(ctx); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(conn.Release)
			}
			if _, err := conn.Exec(ctx, `ANALYZE jobs`); err != nil {
				t.Fatal(err)
			}
			p := plannedPlan(ctx, t, conn, "claim", c.sql, c.args)
			if !strings.Contains(p, "Index Scan using "+c.index) || !strings.Contains(p, "Tid Scan") {
				t.Errorf("the claim does not walk %s and update what it locked by ctid:\n%s", c.index, p)
			}
			for _, bad := range []string{"Seq Scan", "Bitmap", "Sort"} {
				if strings.Contains(p, bad) {
					t.Errorf("the claim's plan has a %s:\n%s", bad, p)
				}
			}
		})
	}
}

// A limited route's claims, like the queue's, update the rows their
// candidates locked by ctid (pgstore's claimStatement says why), through
// a Tid Scan per candidate, and read no table whole; and they pass over
// the process's ended attempts by a hash of their tokens, not by
// comparing each running job with every one (runningNotEnded).
func TestLimitedClaimsUpdateWhatTheyLocked(t *testing.T) {
	// A read of the running jobs, filtered by a hash of the ended tokens.
	endedByHash := regexp.MustCompile(`jobs_group_running_idx on jobs r[^\n]*\n[^\n]*Index Cond[^\n]*\n\s*Filter: \(NOT \(hashed SubPlan`)
	t.Parallel()
	ctx := context.Background()
	s := testenv.MigratedStore(t)
	conn := queuedJobs(ctx, t, s, 2000)
	if _, err := conn.Exec(ctx, `UPDATE jobs SET grp = key`); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `ANALYZE jobs`); err != nil {
		t.Fatal(err)
	}
	const args = "'q', 50, 60000, 60000, 'r', 1, 0, 0, '', '{}', '-infinity', 0"
	for name, sql := range map[string]string{"claim_window": pgstore.ClaimWindowSQL, "claim_grouped": pgstore.ClaimGroupedSQL,
		"claim_one_group": pgstore.ClaimOneGroupSQL} {
		p := plannedPlan(ctx, t, conn, name, sql, args)
		if !strings.Contains(p, "TID Cond: (ctid = c.ctid)") {
			t.Errorf("the %s claim does not update what it locked by ctid:\n%s", name, p)
		}
		if strings.Contains(p, "Seq Scan") {
			t.Errorf("the %s claim's plan has a Seq Scan:\n%s", name, p)
		}
		scans := strings.Count(p, "jobs_group_running_idx on jobs r")
		if scans == 0 || len(endedByHash.FindAllString(p, -1)) != scans {
			t.Errorf("the %s claim does not look its ended attempts up in a hash:\n%s", name, p)
		}
	}
}

// The settings claimPlanSQL makes are local to the claim's implicit
// transaction: every connection a claim ran on plans the statements
// after it with sequential scans, bitmap scans and sorts allowed, and
// chooses between custom and generic plans itself.
func TestClaimSettingsEndWithTheClaim(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := testenv.MigratedStore(t)
	queuedJobs(ctx, t, s, 200).Release() // back to the pool, for the claims
	for range 20 {
		if _, _, err := s.JobClaim(ctx, pgstore.JobClaimParams{Queue: "q", Limit: 10, Lease: time.Minute, MaxRuntime: time.Hour}); err != nil {
			t.Fatal(err)
		}
	}
	// Holding each acquired connection makes the next Acquire another one.
	n := s.Pool().Stat().TotalConns()
	for i := range n {
		conn, err := s.Pool().Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Release()
		var mode, seq, bitmap, sort string
		if err := conn.QueryRow(ctx, `SELECT current_setting('plan_cache_mode'), current_setting('enable_seqscan'),
			current_setting('enable_bitmapscan'), current_setting('enable_sort')`).Scan(&mode, &seq, &bitmap, &sort); err != nil {
			t.Fatal(err)
		}
		if mode != "auto" || seq != "on" || bitmap != "on" || sort != "on" {
			t.Errorf("connection %d of %d after claims: plan_cache_mode %s, enable_seqscan %s, enable_bitmapscan %s, enable_sort %s",
				i+1, n, mode, seq, bitmap, sort)
		}
	}
}

// lanes_advance's statements join the ended heads to jobs and lanes by
// key (and the lanes, once locked, by position), with custom plans (which
// see a batch's length: they had scanned all lanes for 100 ends) and
// generic ones, and statistics taken while nothing had run: no sequential
// scan of either table, and no index but the primary keys and the
// waiting-jobs index (a plan through the partial index of finished or
// running rows compared every such row with every id). Its statements
// are inside a function, so this reads what they scanned
// (pg_stat_get_xact_numscans) rather than their plans.
func TestLanesAdvanceJoinsByKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := testenv.MigratedStore(t)
	lane := &pgstore.LanePolicy{Policy: "newer", OnDead: "continue", GapTimeout: time.Hour, GapPolicy: "park"}
	var batch pgstore.IngestBatch
	// 10,000 lanes of two jobs: big enough that a scan of either table
	// would be the planner's choice only by mistake.
	for i := range 20000 {
		v := int64(i / 10000)
		batch.Jobs = append(batch.Jobs, pgstore.NewJob{Route: "r", Kind: "k", Queue: "q", Key: fmt.Sprint(i % 10000),
			Version: &v, DedupeKey: fmt.Sprint(i), Payload: []byte("{}"), MaxAttempts: 3, Topic: "t", Offset: int64(i), Lane: lane})
	}
	if _, err := s.IngestCommit(ctx, batch); err != nil {
		t.Fatal(err)
	}
	conn, err := s.Pool().Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `ANALYZE jobs; ANALYZE lanes`); err != nil { // nothing running or finished yet
		t.Fatal(err)
	}
	jobs, _, err := s.JobClaim(ctx, pgstore.JobClaimParams{Queue: "q", Limit: 500, Lease: time.Hour, MaxRuntime: time.Hour})
	if err != nil || len(jobs) != 500 {
		t.Fatalf("claim: %d, %v", len(jobs), err)
	}
	// Custom plans, which see each batch's length, and generic ones:
	// plpgsql chooses between them per statement, as prepared statements do.
	for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
		func() {
			tx, err := conn.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(ctx) //nolint:errcheck
			if _, err := tx.Exec(ctx, `SELECT set_config('plan_cache_mode', $1, true),
				set_config('switchyard.lanes_batched', 'on', true)`, mode); err != nil {
				t.Fatal(err)
			}
			allowed := map[string]bool{"jobs_pkey": true, "lanes_pkey": true, "jobs_lane_waiting_idx": true}
			scans := func() map[string]int64 {
				rows, err := tx.Query(ctx, `SELECT c.relname, pg_stat_get_xact_numscans(c.oid) FROM pg_class c
					WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind IN ('r', 'i')`)
				if err != nil {
					t.Fatal(err)
				}
				out := map[string]int64{}
				var name string
				var n int64
				if _, err := pgx.ForEachRow(rows, []any{&name, &n}, func() error { out[name] = n; return nil }); err != nil {
					t.Fatal(err)
				}
				return out
			}
			// Five batches of heads ending, as the completer sends them:
			// updated in place (the trigger's path), or, every other
			// batch, one dead in place and the rest gone to job_history
			// (p_gone, the completer's path).
			var before, after map[string]int64
			for b := range 5 {
				var ids, tokens, versions []int64
				var states, reasons, routes, keys []string
				for _, j := range jobs[b*100 : (b+1)*100] {
					ids, tokens, states = append(ids, j.ID), append(tokens, j.Token), append(states, "succeeded")
					reasons, routes, keys, versions = append(reasons, ""), append(routes, j.Route), append(keys, j.Key), append(versions, *j.Version)
				}
				gone := b%2 == 1
				kept := []int64{}
				if gone {
					states[0], reasons[0], kept = "dead", "permanent", ids[1:]
				}
				if _, err := tx.Exec(ctx, pgstore.CompleteSQL, ids, tokens, states, reasons,
					make([]*string, len(ids)), make([]int64, len(ids)), make([][]byte, len(ids)), make([]*string, len(ids)), []*string(nil), kept); err != nil {
					t.Fatal(err)
				}
				before = scans()
				advance, args := `SELECT lanes_advance($1)`, []any{ids}
				if gone {
					advance = `SELECT lanes_advance($1, p_gone_id => $2, p_gone_route => $3, p_gone_key => $4, p_gone_version => $5)`
					args = []any{ids[:1], ids[1:], routes[1:], keys[1:], versions[1:]}
				}
				if _, err := tx.Exec(ctx, advance, args...); err != nil {
					t.Fatal(err)
				}
				after = scans()
				for name, n := range after {
					if d := n - before[name]; d > 0 && !allowed[name] {
						t.Errorf("%s, batch %d: lanes_advance scanned %s %d times", mode, b, name, d)
					}
				}
				var held int
				if err := tx.QueryRow(ctx, `SELECT count(*) FROM lanes WHERE head_job_id = ANY($1)`, ids).Scan(&held); err != nil || held != 0 {
					t.Fatalf("%s, batch %d: %d lanes still held by the ended heads (%v)", mode, b, held, err)
				}
			}
			if after["jobs_pkey"] == before["jobs_pkey"] {
				t.Error("lanes_advance did not read jobs by primary key: is the test still measuring it?")
			}
		}()
	}
}

// A page of jobs in an unfinished state reads jobs_active_idx, never the
// primary key through the finished history before them, with the
// generic plan a prepared statement gets once it has run a few times.
func TestJobListReadsTheStatesIndex(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := testenv.MigratedStore(t)
	if _, err := s.Pool().Exec(ctx, `
		INSERT INTO jobs (route, kind, queue, state, dedupe_key, payload, max_attempts, finished_at)
		SELECT 'r', 'k', 'q', 'succeeded', g::text, '', 1, now() FROM generate_series(1, 20000) g`); err != nil {
		t.Fatal(err)
	}
	conn := queuedJobs(ctx, t, s, 100)
	if _, err := conn.Exec(ctx, `ANALYZE jobs; SET plan_cache_mode = force_generic_plan`); err != nil {
		t.Fatal(err)
	}
	defer conn.Exec(ctx, `DEALLOCATE list; RESET plan_cache_mode`) //nolint:errcheck
	text := preparedPlan(ctx, t, conn, "list", pgstore.JobListSQL("queued", false), `'queued', NULL, NULL, 0, 50, NULL`)
	if !strings.Contains(text, "jobs_active_idx") || strings.Contains(text, "jobs_pkey") {
		t.Fatalf("a page of queued jobs does not read jobs_active_idx alone:\n%s", text)
	}
}

// A pool's heartbeat covers every lease it holds, 20,000 for a pool of
// 10,000 workers with its prefetch. The first executions of a prepared
// statement get custom plans, which see the array's length: a batch that
// long read jobs in physical order through a hash join, locking rows out
// of id order — and deadlocked with a completion batch (bench --scale,
// leases 10,000). JobHeartbeat sends at most HeartbeatChunk leases per
// statement, which join by primary key in id order in either plan.
func TestHeartbeatChunksJoinByPrimaryKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := testenv.MigratedStore(t)
	conn := queuedJobs(ctx, t, s, 30_000)
	if _, err := conn.Exec(ctx, `ANALYZE jobs`); err != nil {
		t.Fatal(err)
	}
	jobs, _, err := s.JobClaim(ctx, pgstore.JobClaimParams{Queue: "q", Limit: 25_000, Lease: time.Minute, MaxRuntime: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	arrays := func(n int) string {
		var ids, tokens []string
		for _, j := range jobs[:n] {
			ids, tokens = append(ids, fmt.Sprint(j.ID)), append(tokens, fmt.Sprint(j.Token))
		}
		return fmt.Sprintf("'{%s}'::bigint[], '{%s}'::bigint[]", strings.Join(ids, ","), strings.Join(tokens, ","))
	}
	if _, err := conn.Exec(ctx, `SET plan_cache_mode = force_custom_plan`); err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{pgstore.HeartbeatChunk, 20_000} {
		p := preparedPlan(ctx, t, conn, fmt.Sprintf("hb%d", n), pgstore.HeartbeatSQL, arrays(n)+", 60000, 3600000, ''")
		t.Logf("custom plan of a heartbeat of %d leases:\n%s", n, p)
		if n == pgstore.HeartbeatChunk && !strings.Contains(p, "jobs_pkey") {
			t.Errorf("a heartbeat chunk of %d does not join by primary key:\n%s", n, p)
		}
	}
	leases := make([]pgstore.Lease, len(jobs))
	for i, j := range jobs {
		leases[i] = pgstore.Lease{ID: j.ID, Token: j.Token}
	}
	kept, err := s.JobHeartbeat(ctx, leases, time.Minute, time.Hour, "")
	if err != nil || len(kept) != len(jobs) {
		t.Fatalf("heartbeat of %d leases kept %d: %v", len(jobs), len(kept), err)
	}
}

// Every sampler counts the parked DLQ entries every few seconds: the
// count must be answerable from the index of parked entries, which an
// index-only scan reads instead of the DLQ's heap of every payload parked
// or re-driven.
func TestParkedCountReadsTheParkedIndex(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := testenv.MigratedStore(t)
	if _, err := s.Pool().Exec(ctx, `
		INSERT INTO dlq_entries (reason, route, queue, payload, src_topic, src_partition, src_offset, redriven_at)
		SELECT 'poison', 'r', 'q' || i % 3, convert_to(repeat('x', 200), 'UTF8'), 't', 0, i,
			CASE WHEN i % 10 = 0 THEN now() END
		FROM generate_series(1, 20000) i`); err != nil {
		t.Fatal(err)
	}
	// Whether the planner takes the index over the heap depends on the
	// visibility map, which a vacuum can set only once no older
	// transaction runs: not a thing a test on a shared server controls.
	// What the test holds is that the index answers the count at all, its
	// predicate matching the statement's.
	tx, err := s.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `ANALYZE dlq_entries; SET LOCAL enable_seqscan = off`); err != nil {
		t.Fatal(err)
	}
	rows, err := tx.Query(ctx, "EXPLAIN "+pgstore.ParkedCountSQL)
	if err != nil {
		t.Fatal(err)
	}
	plan, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if text := strings.Join(plan, "\n"); !strings.Contains(text, "dlq_entries_parked_idx") {
		t.Fatalf("the parked count cannot read dlq_entries_parked_idx:\n%s", text)
	}
	stats, err := s.QueueStats(ctx, pgstore.Groups{})
	if err != nil {
		t.Fatal(err)
	}
	var parked int64
	for _, q := range stats {
		parked += q.DLQ["poison"]
	}
	if parked != 18000 {
		t.Fatalf("QueueStats counts %d parked entries, want 18000", parked)
	}
}

// A store's connections plan no statement for JIT compilation, unless
// the URL asks for it: Postgres compiles a plan costed past
// jit_above_cost at every execution, and a claim's generic plan on a
// backlog of 600,000 jobs was (pgstore.Open says what it cost).
func TestConnectionsCompileNoStatements(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// Costed at about 150,000, past the default jit_above_cost of 100,000.
	const costly = `EXPLAIN SELECT count(*) FROM generate_series(1, 10000000) g WHERE g % 7 = 1`
	for _, c := range []struct {
		jit  string // the URL's jit parameter, if any
		want bool
	}{{"", false}, {"on", true}} {
		u, err := url.Parse(testenv.DatabaseURL(t))
		if err != nil {
			t.Fatal(err)
		}
		if c.jit != "" {
			q := u.Query()
			q.Set("jit", c.jit)
			u.RawQuery = q.Encode()
		}
		s, err := pgstore.Open(ctx, pgstore.Config{URL: u.String(), Schema: "public", MaxConns: 1})
		if err != nil {
			t.Fatal(err)
		}
		var available bool
		if err := s.Pool().QueryRow(ctx, `SELECT pg_jit_available()`).Scan(&available); err != nil {
			t.Fatal(err)
		}
		rows, err := s.Pool().Query(ctx, costly)
		if err != nil {
			t.Fatal(err)
		}
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		s.Close()
		if err != nil {
			t.Fatal(err)
		}
		plan := strings.Join(lines, "\n")
		if got := strings.Contains(plan, "JIT:"); got != (c.want && available) {
			t.Errorf("with jit=%q in the URL (JIT available: %v), the plan compiles: %v, want %v:\n%s",
				c.jit, available, got, c.want && available, plan)
		}
	}
}
