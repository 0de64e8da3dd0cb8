package pgstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"iter"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/switchyard-dev/switchyard/jobstate"
)

// JobClaimParams asks for up to Limit runnable jobs of one queue.
type JobClaimParams struct {
	Queue      string
	Limit      int
	Lease      time.Duration
	MaxRuntime time.Duration
	// After starts the claim past this position of the queue's claim
	// order; the zero value starts at the beginning. See ClaimPosition.
	After ClaimPosition
	// Limits maps the queue's flow-limited routes to their limits: their
	// jobs are claimed apart, under the route's lock where the claim
	// counts, never past a group's max_running or a rate (see
	// claimLimited).
	Limits map[string]FlowLimit
	// Slots bounds the claim of each route with a max_running: at most so
	// many of its jobs (the claiming process's free slots of it, and what
	// it may hold ready under them; see FlowSlotsLease). A route of Limits
	// with a max_running that Slots does not name is not claimed.
	Slots map[string]int
	// LimitedOnly skips the claim of the queue's other jobs. That claim
	// walks the queue's runnable entries past every limited job, all of
	// them when it finds none of its own: a pool whose last one found
	// nothing skips it for a while (see the dispatcher's claim).
	LimitedOnly bool
	// Throttled, if set, is told which limit held back a limited route's
	// claim that came back short while the route had runnable jobs.
	Throttled func(route, limit string)
	// Ended are the tokens of the claiming process's attempts of limited
	// routes whose handlers have returned and whose outcomes are not
	// written yet: their rows are still running, but they no longer count
	// against a group's max_running (see internal/flow/doc.go).
	Ended []int64
}

// ClaimPosition is a place in a queue's claim order, (scheduled_at, id).
//
// Why claims can start past one: a claimed job leaves a dead entry at the
// front of the claim index until vacuum, and every claim from the
// beginning walks all of them (measured: ~1,000 index pages, 4 ms, per
// claim after a burn-down of 200,000 jobs: most of the database's time).
// A pool working through a backlog starts each claim where its last one
// ended. Jobs that became runnable behind that position (a transaction
// that committed late, a row another transaction held locked) are picked
// up by the next claim from the beginning, which a pool makes whenever a
// claim comes back short and at least every second.
type ClaimPosition struct {
	ScheduledAt time.Time
	ID          int64
}

// Before reports whether p comes before q in claim order.
func (p ClaimPosition) Before(q ClaimPosition) bool {
	return p.ScheduledAt.Before(q.ScheduledAt) || (p.ScheduledAt.Equal(q.ScheduledAt) && p.ID < q.ID)
}

// JobClaim claims up to p.Limit runnable jobs of a queue in ONE statement:
// FOR UPDATE SKIP LOCKED over the partial runnable index, nothing while
// the queue is paused (a claim that starts after Pause commits takes
// nothing, in any process: I10), then claimSet:
// attempts counted here (I5), a fresh fencing token per job from a
// sequence (I4), and the lease measured on the database clock so that
// process clocks never matter. It also returns the position of the last
// job claimed (p.After when none).
func (s *Store) JobClaim(ctx context.Context, p JobClaimParams) ([]*Claimed, ClaimPosition, error) {
	// Never nil: pgx sends a nil slice as NULL, and route <> ALL(NULL)
	// would claim nothing at all.
	limited := append([]string{}, slices.Sorted(maps.Keys(p.Limits))...)
	var jobs []*Claimed
	last := p.After
	if !p.LimitedOnly {
		var err error
		if jobs, last, err = s.claimUnlimited(ctx, p, limited); err != nil {
			return nil, last, err
		}
	}
	for _, route := range limited {
		if len(jobs) >= p.Limit {
			break
		}
		n := p.Limit - len(jobs)
		if p.Limits[route].MaxRunning > 0 {
			n = min(n, p.Slots[route])
		}
		if n <= 0 {
			continue
		}
		claim := s.claimLimited
		if !p.Limits[route].Counted() {
			claim = s.claimCapped
		}
		more, pos, err := claim(ctx, p, route, n)
		jobs = append(jobs, more...) // committed, even beside an error
		if last.Before(pos) {
			last = pos
		}
		if err != nil && len(jobs) == 0 {
			return nil, last, err
		}
		if err != nil {
			// The jobs claimed so far are committed and must reach their
			// workers; the next claim meets the error again if it lasts.
			break
		}
	}
	return jobs, last, nil
}

// claimUnlimited is JobClaim's one statement for the queue's jobs of
// routes without flow limits.
func (s *Store) claimUnlimited(ctx context.Context, p JobClaimParams, limited []string) ([]*Claimed, ClaimPosition, error) {
	return s.claimPlanned(ctx, p.After, claimUnlimitedSQL,
		p.Queue, p.Limit, p.Lease.Milliseconds(), p.MaxRuntime.Milliseconds(), p.After.ScheduledAt, p.After.ID, limited)
}

var claimUnlimitedSQL = claimStatement(
	`(scheduled_at, id) > ($5::timestamptz, $6::bigint) AND route <> ALL($7::text[])`)

// claimStatement is a claim of at most $2 runnable jobs of queue $1 that
// meet where, in claim order, leased for least($3, $4) ms: claimUnlimited
// and claimCapped.
//
// The update reaches the rows c locked by their ctid (a Tid Scan), not by
// id, which cost a descent of jobs_pkey per job (without it,
// JobClaimComplete ran 2-13% faster and bench --only work 8-9% on the
// medians of mirrored runs: docs/performance.md). A ctid names the row
// version c locked, and no one else can write it until the claim
// commits. One case differs from a join by id: a row that another
// transaction changed (and committed) after the statement's snapshot but
// that is still runnable is locked in its new version, which the
// snapshot cannot see, so the update passes over it. It stays queued, its
// lock ends with the claim's transaction, and the claim comes back short:
// the pool's next claim starts from the queue's beginning (ClaimPosition),
// or, for a limited route held back by its limits, the dispatcher's look
// back behind its position finds it.
func claimStatement(where string) string {
	return `
	WITH c AS (
		SELECT ctid FROM jobs
		WHERE queue = $1 AND state IN ('queued', 'retrying') AND scheduled_at <= now() AND ` + where + `
		  AND NOT EXISTS (SELECT 1 FROM paused WHERE kind = 'queue' AND name = $1)
		ORDER BY scheduled_at, id
		LIMIT $2
		FOR UPDATE SKIP LOCKED
	)
	UPDATE jobs j SET ` + claimSet("j", "least($3::bigint, $4::bigint)") + `
	WHERE j.ctid = ANY(ARRAY(SELECT ctid FROM c))
	RETURNING ` + workerColumns
}

// planSQL goes before each hot statement of a lease (claim, completion,
// heartbeat, release, the held-job updates) in its batch: one implicit
// transaction, to which the settings are local. The statement then runs a
// plan made once per connection, and always the same one: a claim walks
// its claim index from the position, locks, and updates what it locked by
// ctid; a batch joins its ids to jobs by primary key, in id order.
//
// Why: a claim's custom plan took 0.35 ms of planning per call, a fifth
// of its 1.75 ms (pg_stat_statements, track_planning, bench --only work),
// and Postgres never chose the generic plan, which it costs for a tenth of
// the candidates (LIMIT $2 is unknown to it). Forced alone, the generic
// plan follows the statistics: those of an empty table, or of a route
// filter that the statistics say removes every row, give a sequential
// scan and a sort (work went from 25k to 2k jobs/s). Those of a
// near-empty table, a new deployment's until autovacuum's first ANALYZE,
// gave every completion batch a sequential scan of jobs, which locks in
// physical order and grows with the table (1.4 ms for five jobs at
// 10,000, bench --only e2e). Without sequential or bitmap scans and
// sorts, the index walks are the only plans left
// (TestClaimPlanWalksTheClaimIndex, TestBatchStatementsJoinByPrimaryKey);
// work went from 24.7k to 27.4k jobs/s (medians of five rounds in turn).
const planSQL = `SELECT set_config('plan_cache_mode', 'force_generic_plan', true),
	set_config('enable_seqscan', 'off', true), set_config('enable_bitmapscan', 'off', true),
	set_config('enable_sort', 'off', true)`

// tokenSQL makes the transaction it runs in wait for its WAL flush at
// commit whatever the session's synchronous_commit, which an operator may
// set off (docs/performance.md, "Postgres settings that matter"). Every
// transaction that hands jobs out under fresh fencing tokens — a claim, a
// completion batch that hands lane jobs off — runs it: committed without
// the flush, a Postgres crash could lose jobs already handed to workers,
// to be handed out again while they run (two attempts at once, a lane's
// head running beside the next job), with the token sequence rolled back
// behind tokens in use (I4). TestHandedOutTokensSurviveAPostgresCrash
// fails that way without it. A session's stronger setting (remote_apply,
// say) is kept.
const tokenSQL = `set_config('synchronous_commit',
	CASE current_setting('synchronous_commit') WHEN 'off' THEN 'local' ELSE current_setting('synchronous_commit') END, true)`

// claimPlanSQL is planSQL for a claim: it hands jobs out (tokenSQL).
const claimPlanSQL = planSQL + ", " + tokenSQL

// planned runs sql after planSQL, in one round trip, and hands its rows
// to read. On an error nothing was written: the batch is one transaction.
func (s *Store) planned(ctx context.Context, read func(pgx.Rows) error, sql string, args ...any) error {
	return s.plannedWith(ctx, planSQL, read, sql, args...)
}

// plannedWith is planned after plan, planSQL or claimPlanSQL.
func (s *Store) plannedWith(ctx context.Context, plan string, read func(pgx.Rows) error, sql string, args ...any) error {
	b := &pgx.Batch{}
	b.Queue(plan)
	b.Queue(sql, args...).Query(read)
	return s.pool.SendBatch(ctx, b).Close()
}

// plannedExec is planned for a statement that returns no rows, and
// returns how many it changed.
func (s *Store) plannedExec(ctx context.Context, sql string, args ...any) (int64, error) {
	b := &pgx.Batch{}
	b.Queue(planSQL)
	var n int64
	b.Queue(sql, args...).Exec(func(tag pgconn.CommandTag) error { n = tag.RowsAffected(); return nil })
	err := s.pool.SendBatch(ctx, b).Close()
	return n, err
}

// claimPlanned runs a claim statement after claimPlanSQL and collects its
// jobs. On an error nothing was claimed.
func (s *Store) claimPlanned(ctx context.Context, after ClaimPosition, sql string, args ...any) ([]*Claimed, ClaimPosition, error) {
	jobs, last := []*Claimed(nil), after
	err := s.plannedWith(ctx, claimPlanSQL, func(rows pgx.Rows) error {
		var err error
		jobs, last, err = collectClaimed(rows, after)
		return err
	}, sql, args...)
	if err != nil {
		return nil, after, err
	}
	return jobs, last, nil
}

// collectClaimed reads a claim's jobs and the claim position of the last
// of them in the queue's order (after when there are none).
func collectClaimed(rows pgx.Rows, after ClaimPosition) ([]*Claimed, ClaimPosition, error) {
	last, scan := after, newClaimedRows()
	jobs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (*Claimed, error) {
		j, err := scan.scan(r)
		if err != nil {
			return nil, err
		}
		if pos := (ClaimPosition{ScheduledAt: j.ScheduledAt, ID: j.ID}); last.Before(pos) {
			last = pos
		}
		return j, nil
	})
	return jobs, last, err
}

// claimCapped claims up to limit jobs of a route whose one limit is a
// max_running, which its claim does not count (the slots hold it where
// jobs start): the queue's claim over the route's runnable jobs (of any
// group value: a route that had groups once keeps their values on its
// jobs), from the pool's position, with no lock.
func (s *Store) claimCapped(ctx context.Context, p JobClaimParams, route string, limit int) ([]*Claimed, ClaimPosition, error) {
	return s.claimPlanned(ctx, p.After, claimCappedSQL, p.Queue, limit, p.Lease.Milliseconds(), p.MaxRuntime.Milliseconds(),
		route, p.After.ScheduledAt, p.After.ID)
}

var claimCappedSQL = claimStatement(
	`route = $5 AND grp IS NOT NULL AND (scheduled_at, id) > ($6::timestamptz, $7::bigint)`)

// FlowLimit is a route's fleet-wide limits (SPEC §2 I9); the zero value
// limits nothing. A limited route's jobs carry a group value (NewJob.Group)
// and are claimed apart from the queue's: by claimCapped when a
// max_running is its one limit, else by claimLimited.
type FlowLimit struct {
	// MaxRunning caps the route's running jobs; 0: no cap. It is held
	// where jobs start, by slots the processes lease (FlowSlotsLease),
	// not by the claim, which it only bounds (JobClaimParams.Slots).
	MaxRunning int
	// GroupMaxRunning caps the running jobs of each group value; 0: the
	// route is not grouped.
	GroupMaxRunning int
	// RateInterval spaces the route's starts (rate_limit per / limit); 0:
	// no rate limit. RateBurst starts more may be made at once.
	RateInterval time.Duration
	RateBurst    int
}

// Names are the limits set, by LimitMaxRunning, LimitGroup and LimitRate.
func (l FlowLimit) Names() []string {
	var out []string
	if l.MaxRunning > 0 {
		out = append(out, LimitMaxRunning)
	}
	if l.GroupMaxRunning > 0 {
		out = append(out, LimitGroup)
	}
	if l.RateInterval > 0 {
		out = append(out, LimitRate)
	}
	return out
}

// Limited reports whether any limit is set.
func (l FlowLimit) Limited() bool {
	return l.MaxRunning > 0 || l.GroupMaxRunning > 0 || l.RateInterval > 0
}

// Counted reports whether the route's claims count (a group's
// max_running or a rate): those are claimLimited's, one at a time per
// route across the fleet.
func (l FlowLimit) Counted() bool {
	return l.GroupMaxRunning > 0 || l.RateInterval > 0
}

// Throttle limits, as switchyard_flow_throttled_total names them.
const (
	LimitMaxRunning = "max_running"
	LimitGroup      = "group"
	LimitRate       = "rate"
)

// claimLimited claims up to limit jobs of one route whose claim counts:
// a group's max_running or a rate (SPEC §2 I9); internal/flow/doc.go
// holds the argument of why no limit can be exceeded. Each pass is one
// round trip and one implicit transaction of two statements: the route's
// advisory lock, so that its counted claims run one at a time across
// every process; then the claim (claimLimitedStatement), whose
// snapshot is taken once the lock is granted and which also reads the
// room the rate left. A route without groups takes its one group from
// where the pool's claims left off (see ClaimPosition). A grouped route
// first takes its next jobs in claim order (claimWindowSQL); if that came
// back short, it walks its groups from the one after the last this
// process walked to, each from its start (a group held at its cap keeps
// old jobs behind any position), then from the first group again. Passes
// stop once the rate has no room left, or once a pass came back short
// with no runnable job of the route left. When a limit held the claim
// back, it is named to p.Throttled.
func (s *Store) claimLimited(ctx context.Context, p JobClaimParams, route string, limit int) ([]*Claimed, ClaimPosition, error) {
	l := p.Limits[route]
	var jobs []*Claimed
	last := p.After
	ended := append([]int64{}, p.Ended...) // never nil: token <> ALL(NULL) counts nothing
	grouped := l.GroupMaxRunning > 0
	type pass struct {
		sql   string
		after string // $9
		from  ClaimPosition
	}
	passes := []pass{{claimOneGroupSQL, GroupAll, p.After}}
	cursor := ""
	if grouped {
		cursor = s.groupCursor(route)
		passes = []pass{{claimWindowSQL, "", p.After}, {claimGroupedSQL, cursor, ClaimPosition{}}}
		if cursor != "" {
			passes = append(passes, pass{claimGroupedSQL, "", ClaimPosition{}})
		}
	}

	var err error
	var rateRoom *int
	var left *bool
	for _, ps := range passes {
		// A pass that came back short and left nothing runnable (left is
		// false; NULL after a full pass) leaves nothing for the walk: it
		// would take the route's lock again to find no job, as it did for
		// every claim of a grouped route that kept up with its records.
		if len(jobs) >= limit || (rateRoom != nil && *rateRoom <= 0) || (left != nil && !*left) {
			break
		}
		walk := ps.sql == claimGroupedSQL
		if walk && ps.after == "" {
			cursor = "" // from the first group: the next walk starts after this one's last
		}
		b := &pgx.Batch{}
		// The window claim is planned once per connection (a generic
		// plan, which reads the window's jobs by primary key whatever the
		// parameters): Postgres judged its custom plans cheaper and made
		// one at every claim, 1.5 ms of planning under the route's lock,
		// a third of the claim (bench grouped).
		planning := "auto"
		if ps.sql == claimWindowSQL {
			planning = "force_generic_plan"
		}
		b.Queue(`SELECT pg_advisory_xact_lock(hashtext($1)), set_config('plan_cache_mode', $2, true), `+tokenSQL,
			s.flowLockKey(route), planning)
		b.Queue(ps.sql, p.Queue, limit-len(jobs), p.Lease.Milliseconds(), p.MaxRuntime.Milliseconds(), route,
			l.GroupMaxRunning, l.RateInterval.Microseconds(), l.RateBurst, ps.after, ended,
			ps.from.ScheduledAt, ps.from.ID)
		err = func() error {
			br := s.pool.SendBatch(ctx, b)
			defer br.Close()
			if _, err := br.Exec(); err != nil {
				return err
			}
			rows, err := br.Query()
			if err != nil {
				return err
			}
			var more []*Claimed
			var at time.Time
			var grp string
			scan := newClaimedRows(&at, &grp, nil, nil)
			for rows.Next() {
				if rows.RawValues()[0] == nil {
					// The room row: no job, and what the rate left.
					dst := make([]any, len(rows.FieldDescriptions()))
					dst[len(dst)-2], dst[len(dst)-1] = &rateRoom, &left
					if err := rows.Scan(dst...); err != nil {
						return err
					}
					continue
				}
				j, err := scan.scan(rows)
				if err != nil {
					return err
				}
				if pos := (ClaimPosition{ScheduledAt: at, ID: j.ID}); last.Before(pos) {
					last = pos
				}
				if walk && grp > cursor {
					cursor = grp
				}
				more = append(more, j)
			}
			if err := rows.Err(); err != nil {
				return err
			}
			if err := br.Close(); err != nil {
				return err // the implicit transaction failed: nothing was claimed
			}
			jobs = append(jobs, more...)
			return nil
		}()
		if err != nil {
			break
		}
	}
	if grouped {
		s.setGroupCursor(route, cursor)
	}
	if err == nil && len(jobs) < limit && left != nil && *left && p.Throttled != nil {
		switch {
		case rateRoom != nil && *rateRoom <= 0:
			p.Throttled(route, LimitRate)
		case grouped:
			p.Throttled(route, LimitGroup)
		}
	}
	return jobs, last, err
}

// claimLimitedStatement is the claim of a limited route's jobs around
// the choice of candidates c (claimWindowSQL, claimGroupedSQL,
// claimOneGroupSQL) and its test of what is left. $1 queue, $2 at most
// so many, $3/$4 lease and max_runtime (ms), $5 route, $6 each group's
// max_running (0: none), $7/$8 the rate's interval (µs; 0: none) and
// burst, $9 the group to start after (the empty string for the first:
// group values are never empty), $10 the tokens of
// JobClaimParams.Ended, which no count counts, $11/$12 the ClaimPosition
// to take jobs after. The route's max_running is not counted here: it is
// held where jobs start, by slots (FlowSlotsLease).
//
//   - limits and room are what the rate leaves: the starts it allows now
//     (GCRA: start k is allowed while tat + k·interval − burst·interval
//     ≤ now, counting from greatest(tat, now)); nothing while the queue
//     is paused.
//   - c chooses at most room runnable jobs, none past its group's room
//     (its max_running minus its running jobs), and locks them.
//   - the rate's tat then moves on by one interval per job claimed.
//
// Its rows are the claimed jobs, then one row without a job (its id
// NULL) that ends in what the claim left of the rate (NULL without one)
// and, when the claim came back short, whether the route still has
// runnable jobs that match left: if it has, a limit held the claim back.
// Read in the claim's own statement, the rate's room costs no second
// statement under the lock; the statement's snapshot still shows the
// jobs it claimed as runnable, so the test of what is left passes over
// them.
func claimLimitedStatement(candidates, left string) string {
	return `
	WITH RECURSIVE limits AS (
		SELECT
			CASE WHEN $7::bigint > 0 THEN coalesce((SELECT greatest(0, floor(
				(extract(epoch FROM now() - greatest(tat, now())) * 1e6 + $8::int * $7::bigint) / $7::bigint) + 1)::int
				FROM flow_rates WHERE route = $5), $8::int + 1) END AS rate
	), room AS (
		SELECT CASE WHEN EXISTS (SELECT 1 FROM paused WHERE kind = 'queue' AND name = $1) THEN 0
			ELSE least($2::int, rate) END AS n
		FROM limits
	), ` + candidates + `
	), claimed AS (
		UPDATE jobs j SET ` + claimSet("j", "least($3::bigint, $4::bigint)") + `
		FROM c WHERE j.ctid = c.ctid -- as claimStatement's, for the same reason
		RETURNING ` + workerColumns + `, j.scheduled_at, j.grp
	), rate AS (
		INSERT INTO flow_rates AS f (route, tat)
		SELECT $5, now() + (SELECT count(*) FROM claimed) * $7::bigint * interval '1 microsecond'
		WHERE $7::bigint > 0
		ON CONFLICT (route) DO UPDATE
		SET tat = greatest(f.tat, now()) + (SELECT count(*) FROM claimed) * $7::bigint * interval '1 microsecond'
	), got AS (
		SELECT count(*)::int AS n FROM claimed
	)
	SELECT claimed.*, NULL::int, NULL::bool FROM claimed
	UNION ALL
	SELECT claimed.*, l.rate - got.n,
		-- In claim order, so that the planner reads an index of the
		-- route's runnable jobs rather than jobs from its start.
		CASE WHEN got.n < $2::int THEN coalesce((SELECT true FROM jobs j
			WHERE j.route = $5 AND j.state IN ('queued', 'retrying') AND j.scheduled_at <= now()
			  AND j.id NOT IN (SELECT id FROM c) AND ` + left + `
			ORDER BY j.scheduled_at, j.id LIMIT 1), false) END
	FROM limits l CROSS JOIN got LEFT JOIN claimed ON false`
}

// runningNotEnded is the test that a running job r of a limited claim
// counts: its attempt has not ended in the claiming process ($10,
// JobClaimParams.Ended, whose outcomes wait for the completer). As a
// subquery, not token <> ALL($10): the claims run a generic plan, in which
// the array is a parameter that <> ALL compares every row's token with
// one element at a time, a cost of running × ended under the route's
// lock; NOT IN a subquery is one hash probe a row. With 4,000 running and
// 3,600 of them ended (a pool of thousands of workers), a claim of 100
// took 39–44 ms against 9–10.5 (BenchmarkGroupedClaimBesideEndedAttempts);
// at bench grouped's 430 and 383, the filter alone 0.36–0.56 against
// 0.12–0.20 ms (docs/performance.md). Tokens are never NULL, so NOT IN
// means what <> ALL did.
const runningNotEnded = `r.token NOT IN (SELECT unnest($10::bigint[]))`

// claimWalkStatement is the choice of candidates that walks groups g
// (claimGroupedSQL, claimOneGroupSQL): from each group, its oldest
// runnable jobs past $11/$12, as many as the group's room, until room is
// used up.
func claimWalkStatement(groups string) string {
	return `g(grp) AS (` + groups + `
	), c AS (
		SELECT t.id, t.ctid FROM g
		CROSS JOIN LATERAL (
			SELECT CASE WHEN $6::int > 0 THEN $6::int - (SELECT count(*) FROM jobs r
				WHERE r.route = $5 AND r.grp = g.grp AND r.state = 'running' AND r.grp IS NOT NULL
				  AND ` + runningNotEnded + `)::int
				ELSE $2::int END AS n
		) gr
		CROSS JOIN LATERAL (
			SELECT id, ctid FROM jobs j
			WHERE j.route = $5 AND j.grp = g.grp AND j.state IN ('queued', 'retrying') AND j.grp IS NOT NULL
			  AND j.scheduled_at <= now() AND j.queue = $1 AND (j.scheduled_at, j.id) > ($11::timestamptz, $12::bigint)
			ORDER BY j.scheduled_at, j.id
			LIMIT greatest(gr.n, 0)
			FOR UPDATE SKIP LOCKED
		) t
		WHERE g.grp IS NOT NULL
		LIMIT (SELECT n FROM room)`
}

// claimWindow is how many of a grouped route's next runnable jobs, per
// job asked for, its window claim looks at. Two, not more: every row of
// the window is read, ranked and sorted under the route's lock, and a
// window that comes back short only hands over to the walk. bench
// grouped (1,000 groups, claims of ~360 jobs), three rounds each in turn:
// windows of 1, 1.5 and 2 ran at 33–35k jobs/s, 4 at 30k, 8 at 27–28k;
// with 100 groups held at their cap, 2 and 4 ran alike (8–12k).
const claimWindow = 2

// The three claims of a limited route:
//
//   - claimWindowSQL, a grouped route's first: the route's next runnable
//     jobs in claim order past $11/$12 (a window of claimWindow × $2,
//     one range of jobs_group_order_idx), of which each group's first
//     ones up to its room. Where the groups are many and mixed, as a
//     route's of 1,000 tenants, this fills a claim from one index range
//     and one count of the window's groups' running jobs: the walk took
//     4 ms for 57 jobs, three index descents per group visited (bench
//     grouped). It serves jobs in claim order, so one group's flood
//     fills its window with jobs that group has no room for: the claim
//     comes back short, and the walk follows.
//   - claimGroupedSQL walks a grouped route's groups that have a
//     runnable job, from the one after $9 (a loose index scan of
//     jobs_group_runnable_idx: one descent per group, however many jobs
//     a group holds), in value order, each from its start: a flood in
//     one group is one step of the walk, and every group with room gets
//     its turn.
//   - claimOneGroupSQL claims a route without groups' one group,
//     GroupAll, passed as $9, past $11/$12 — walking from the start of
//     the index would step over the dead entries of every job claimed
//     since the last vacuum, all in that one group.
var (
	claimWindowSQL = claimLimitedStatement(`w AS MATERIALIZED (
		SELECT id, grp, scheduled_at FROM jobs
		WHERE route = $5 AND state IN ('queued', 'retrying') AND grp IS NOT NULL AND scheduled_at <= now()
		  AND queue = $1 AND (scheduled_at, id) > ($11::timestamptz, $12::bigint)
		ORDER BY scheduled_at, id
		LIMIT $2::int * `+strconv.Itoa(claimWindow)+`
	), ranked AS (
		-- Each group's running jobs sort before its window jobs, so that a
		-- window job's rank within its group counts them too. One sort, no
		-- join: with statistics from when nothing ran, the planner joined
		-- the window to the running jobs' counts by a nested loop, 64 × 256
		-- comparisons, 2.3 ms of a 4.5 ms claim. The groups are told apart
		-- bytewise: any order of them does, and a database's collation
		-- (C.UTF-8 here, en_US and the like elsewhere) compares each pair
		-- through strcoll, without abbreviated keys. Sorting a claim's
		-- window took 1.6 ms for 1,328 rows that way, 0.5 ms for 1,904.
		SELECT id, scheduled_at, id IS NOT NULL AS candidate,
			row_number() OVER (PARTITION BY grp COLLATE "C" ORDER BY id IS NOT NULL, scheduled_at, id) AS nth
		FROM (
			SELECT grp, id, scheduled_at FROM w
			UNION ALL
			SELECT r.grp, NULL, NULL FROM jobs r
			WHERE r.route = $5 AND r.state = 'running' AND r.grp IS NOT NULL AND `+runningNotEnded+`
		) u
	), c AS (
		-- The chosen ids as an array, in claim order, no more than room:
		-- read by primary key in any plan (joined to ranked, the generic
		-- plan merge-joined a scan of all of jobs' primary key, 9 ms), and
		-- only those that can be taken (a row locked meanwhile is passed
		-- over, not replaced: the claim comes back short by it).
		SELECT j.id, j.ctid FROM unnest(ARRAY(SELECT id FROM ranked WHERE candidate AND nth <= $6::int
			ORDER BY scheduled_at, id LIMIT (SELECT n FROM room))) WITH ORDINALITY AS r(id, ord)
		JOIN jobs j ON j.id = r.id
		WHERE j.state IN ('queued', 'retrying')
		ORDER BY r.ord
		LIMIT (SELECT n FROM room)
		FOR UPDATE OF j SKIP LOCKED`,
		`j.grp > $9 AND j.grp IS NOT NULL`) // every group: $9 is the empty string here
	claimGroupedSQL = claimLimitedStatement(claimWalkStatement(`
		(SELECT grp FROM jobs
		 WHERE route = $5 AND grp > $9 AND state IN ('queued', 'retrying') AND grp IS NOT NULL AND scheduled_at <= now()
		 ORDER BY route, grp LIMIT 1)
		UNION ALL
		SELECT (SELECT j.grp FROM jobs j
			WHERE j.route = $5 AND j.grp > g.grp AND j.state IN ('queued', 'retrying') AND j.grp IS NOT NULL
			  AND j.scheduled_at <= now()
			ORDER BY j.route, j.grp LIMIT 1)
		FROM g WHERE g.grp IS NOT NULL`),
		`j.grp IS NOT NULL`)
	claimOneGroupSQL = claimLimitedStatement(claimWalkStatement(`SELECT $9::text`),
		`j.grp = $9 AND (j.scheduled_at, j.id) > ($11::timestamptz, $12::bigint)`)
)

// FlowGroupsAssign puts the unfinished jobs of limited routes that carry
// no group value (stored before the route had limits) in the route's
// one group, GroupAll: only jobs with a group value are claimed under
// the limits, and the others of a limited route would never be claimed.
// Every process that claims calls it at start: one pass over the
// unfinished jobs, and nothing to change after the first.
func (s *Store) FlowGroupsAssign(ctx context.Context, routes []string) (int64, error) {
	if len(routes) == 0 {
		return 0, nil
	}
	tag, err := s.pool.Exec(ctx, `
		UPDATE jobs SET grp = $2
		WHERE state IN ('waiting', 'queued', 'running', 'retrying') AND route = ANY($1) AND grp IS NULL`,
		routes, GroupAll)
	return tag.RowsAffected(), err
}

// groupCursor is the group value after which this process's next claim
// of a limited route starts walking its groups, so that its claims take
// turns among the groups instead of always serving the first values.
func (s *Store) groupCursor(route string) string {
	s.cursorMu.Lock()
	defer s.cursorMu.Unlock()
	return s.groupCursors[route]
}

func (s *Store) setGroupCursor(route, grp string) {
	s.cursorMu.Lock()
	defer s.cursorMu.Unlock()
	if s.groupCursors == nil {
		s.groupCursors = map[string]string{}
	}
	s.groupCursors[route] = grp
}

// claimSet is the SET list of a claim of the jobs row aliased alias,
// leased for leaseMS (an SQL expression, milliseconds): the one
// definition, used by JobClaim and rendered into functions.sql for the
// lane handoff. Written into each statement rather than called as a
// function: a PL/pgSQL function in the claim path cost 1.5-2 ms of
// end-to-end p50 (bench --only e2e, three rounds against the statement).
func claimSet(alias, leaseMS string) string {
	return `state = 'running', attempts = ` + alias + `.attempts + 1, token = nextval('job_token_seq'), started_at = now(),
			lease_expires_at = now() + ` + leaseMS + ` * interval '1 millisecond'`
}

// Claimed is a job as its claim (or handoff) hands it to a worker: the
// row at claim time, under its attempt's lease.
type Claimed struct {
	ID          int64
	Kind        string
	Queue       string
	Route       string
	Key         string
	Version     *int64
	Attempt     int // attempts, counted at the claim
	MaxAttempts int
	Token       int64
	Payload     []byte
	Headers     []HeaderRow
	Source      SourceRow // zero for a job that did not come from Kafka
	CreatedAt   time.Time
	Lane        bool
	Checkpoint  []byte
	// ScheduledAt is when the job became runnable (its queue-wait starts);
	// ArrivedAt is its record's timestamp, else CreatedAt (its end-to-end
	// latency starts).
	ScheduledAt, ArrivedAt time.Time
	// AttemptSpan is the traceparent of the last attempt's span that an
	// outcome recorded (Outcome.Span); "" when none did.
	AttemptSpan string
}

// workerColumns are what a worker is handed of a job row aliased j, in
// claimedRows' order.
const workerColumns = `j.id, j.kind, j.queue, j.route, j.key, j.version, j.attempts, j.max_attempts,
	j.token, j.payload, j.header_keys, j.header_values,
	coalesce(j.src_topic, ''), coalesce(j.src_partition, 0), coalesce(j.src_offset, 0), j.created_at, j.lane,
	j.checkpoint, j.scheduled_at, coalesce(j.record_at, j.created_at), coalesce(j.attempt_span, '')`

// claimedRows scans the rows of one statement that returns workerColumns,
// then the statement's extra columns. Its scan targets are made once per
// statement, not per row, and the columns whose values repeat from job to
// job (kind, queue, route, topic) share one string per value among the
// statement's jobs. A row took about ten allocations; the targets and
// the names were four or five of them (BenchmarkJobClaimComplete).
type claimedRows struct {
	row Claimed
	// The headers' arrays: pgtype's own array targets, which scan an
	// empty array (most jobs') without allocating; a []string target
	// took three allocations through reflection.
	hk    pgtype.FlatArray[string]
	hv    pgtype.FlatArray[[]byte]
	dest  []any
	names map[string]string
	// The targets of kind, queue, route and topic, made with the rest.
	kind, queue, route, topic sharedText
}

// newClaimedRows scans workerColumns into its row, then extra.
func newClaimedRows(extra ...any) *claimedRows {
	c := &claimedRows{names: map[string]string{}}
	j := &c.row
	c.kind, c.queue, c.route, c.topic = c.shared(&j.Kind), c.shared(&j.Queue), c.shared(&j.Route), c.shared(&j.Source.Topic)
	c.dest = append([]any{&j.ID, &c.kind, &c.queue, &c.route, &j.Key, &j.Version,
		&j.Attempt, &j.MaxAttempts, &j.Token, &j.Payload, &c.hk, &c.hv, &c.topic, &j.Source.Partition,
		&j.Source.Offset, &j.CreatedAt, &j.Lane, &j.Checkpoint, &j.ScheduledAt, &j.ArrivedAt, &j.AttemptSpan}, extra...)
	return c
}

// scan reads r's row into a new Claimed.
func (c *claimedRows) scan(r pgx.Row) (*Claimed, error) {
	c.row, c.hk, c.hv = Claimed{}, nil, nil
	if err := r.Scan(c.dest...); err != nil {
		return nil, err
	}
	j := new(Claimed)
	*j = c.row
	for i := range c.hk {
		if i < len(c.hv) {
			j.Headers = append(j.Headers, HeaderRow{Key: c.hk[i], Value: c.hv[i]})
		}
	}
	return j, nil
}

// shared is a scan target that stores a text column's value in dst as the
// string the statement's other rows got for the same value.
func (c *claimedRows) shared(dst *string) sharedText { return sharedText{names: c.names, dst: dst} }

type sharedText struct {
	names map[string]string
	dst   *string
}

// ScanBytes is pgtype.BytesScanner: b is the driver's, valid during the
// call only (a lookup by string(b) does not copy it).
func (t *sharedText) ScanBytes(b []byte) error {
	v, ok := t.names[string(b)]
	if !ok {
		v = string(b)
		t.names[v] = v
	}
	*t.dst = v
	return nil
}

// Lease identifies one held lease.
type Lease struct {
	ID    int64
	Token int64
}

// AttemptKey is the deployment's key of attempt secrets (migration 0015).
// A table emptied since (by hand) gets a new key, so that a process can
// start; the secrets of attempts running then stop saving checkpoints.
func (s *Store) AttemptKey(ctx context.Context) ([]byte, error) {
	var key []byte
	err := s.pool.QueryRow(ctx, `
		WITH made AS (
			INSERT INTO attempt_key (key) SELECT uuid_send(gen_random_uuid()) || uuid_send(gen_random_uuid())
			WHERE NOT EXISTS (SELECT 1 FROM attempt_key)
			ON CONFLICT DO NOTHING
			RETURNING key
		)
		SELECT key FROM made UNION ALL SELECT key FROM attempt_key LIMIT 1`).Scan(&key)
	return key, err
}

// MaxCheckpointBytes bounds a saved checkpoint: progress, not data.
const MaxCheckpointBytes = 1 << 20

// JobCheckpoint saves an attempt's progress for the next attempt, if the
// attempt still holds the job (ErrLeaseLost otherwise).
func (s *Store) JobCheckpoint(ctx context.Context, id, token int64, data []byte) error {
	if len(data) > MaxCheckpointBytes {
		return fmt.Errorf("checkpoint of %d bytes is over the %d-byte limit", len(data), MaxCheckpointBytes)
	}
	if data == nil {
		data = []byte{}
	}
	return s.updateHeld(ctx, `checkpoint = $3`, id, token, data)
}

// JobHolder is the fencing token of the attempt that holds job id now:
// ErrLeaseLost if none does (the job is not running, or its lease ran
// out).
func (s *Store) JobHolder(ctx context.Context, id int64) (int64, error) {
	var token int64
	err := s.pool.QueryRow(ctx, `SELECT token FROM jobs WHERE id = $1 AND state = 'running' AND lease_expires_at > now()`, id).Scan(&token)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, ErrLeaseLost
	}
	return token, err
}

// JobRestart starts the runtime clocks of held attempts again, in one
// statement per heartbeat chunk: started_at is now and the lease runs from
// now (at most max_runtime), as at a claim. A job that waited long in its
// pool for a worker (handed off, or prefetched) uses it when it finally
// starts. It returns the tokens of the attempts restarted; any other is no
// longer held. Like a heartbeat, the lease never outlasts holder's share
// of the route's max_running (slotLeaseCap).
func (s *Store) JobRestart(ctx context.Context, leases []Lease, lease, maxRuntime time.Duration, holder string) (map[int64]bool, error) {
	return s.leasesUpdate(ctx, restartSQL, leases, lease, maxRuntime, holder)
}

var restartSQL = `
		UPDATE jobs j SET started_at = now(),
			lease_expires_at = least(now() + least($3::bigint, $4::bigint) * interval '1 millisecond', ` + slotLeaseCap("$5::text") + `)
		FROM unnest($1::bigint[], $2::bigint[]) AS t(id, token)
		WHERE ` + heldSQL + ` AND coalesce(j.lease_expires_at > now(), false)
		RETURNING j.token`

// slotLeaseCap is the expiry of the share that holder (an SQL
// expression) leases of the max_running of the route of the job row j
// (FlowSlotsLease); NULL, which least() passes over, where it has none. A
// lease that a heartbeat or a restart sets is never later: the share's
// slot could otherwise be leased to another process while the job still
// held it, had the statement reached the database after the process
// checked its share (internal/flow/doc.go).
func slotLeaseCap(holder string) string {
	return `(SELECT f.expires_at FROM flow_slots f WHERE f.route = j.route AND f.holder = ` + holder + `)`
}

// updateHeld applies set (whose parameters start at $3) to job id if the
// attempt of the given token still holds it, or returns ErrLeaseLost.
func (s *Store) updateHeld(ctx context.Context, set string, id, token int64, args ...any) error {
	n, err := s.plannedExec(ctx, updateHeldSQL(set), append([]any{id, token}, args...)...)
	if err == nil && n == 0 {
		return ErrLeaseLost
	}
	return err
}

// updateHeldSQL is updateHeld's statement.
func updateHeldSQL(set string) string {
	return `UPDATE jobs j SET ` + set + `
		FROM (VALUES ($1::bigint, $2::bigint)) AS t(id, token)
		WHERE ` + heldSQL + ` AND j.lease_expires_at > now()`
}

// JobHeartbeat extends every given lease in one statement, never past
// started_at + maxRuntime nor past holder's share of the job's route's
// max_running, if it has one. It returns the tokens of the leases it extended;
// any other lease is lost (expired, rescued or re-claimed) and its handler
// must stop.
// An expired lease is not revived: the rescuer may already be acting on it.
func (s *Store) JobHeartbeat(ctx context.Context, leases []Lease, lease, maxRuntime time.Duration, holder string) (map[int64]bool, error) {
	return s.leasesUpdate(ctx, heartbeatSQL, leases, lease, maxRuntime, holder)
}

// leasesUpdate runs sql (heartbeatSQL, restartSQL) over leases, a chunk
// at a time, and returns the tokens of the leases it changed.
func (s *Store) leasesUpdate(ctx context.Context, sql string, leases []Lease, lease, maxRuntime time.Duration, holder string) (map[int64]bool, error) {
	kept := make(map[int64]bool, len(leases))
	for ids, tokens := range leaseChunks(leases) {
		err := s.planned(ctx, collectTokens(kept), sql, ids, tokens, lease.Milliseconds(), maxRuntime.Milliseconds(), holder)
		if err != nil {
			return nil, err
		}
	}
	return kept, nil
}

// heartbeatChunk is the most leases one heartbeat statement extends, as
// completeBatch bounds a completion. A pool's leases are unbounded (its
// concurrency, plus prefetch), and the custom plans of a prepared
// statement's first runs see the batch's length: past about a thousand
// ids the planner reads jobs in physical order into a hash join, locking
// rows out of the id order splitLeases keeps, and a completion batch of
// the same rows deadlocked with it (bench --scale, 10,000 leases). A
// chunk this size joins by primary key in either plan
// (TestHeartbeatChunksJoinByPrimaryKey) and holds its locks for one short
// transaction.
const heartbeatChunk = 100

// leaseChunks yields the leases' ids and tokens in id order, at most
// heartbeatChunk at a time, for statements that are sent one per chunk,
// each its own transaction.
func leaseChunks(leases []Lease) iter.Seq2[[]int64, []int64] {
	ids, tokens := splitLeases(leases)
	return func(yield func([]int64, []int64) bool) {
		for from := 0; from < len(ids); from += heartbeatChunk {
			to := min(from+heartbeatChunk, len(ids))
			if !yield(ids[from:to], tokens[from:to]) {
				return
			}
		}
	}
}

// JobCancelled returns, of the given leases, the tokens of those whose
// job was cancelled: a lease that a heartbeat did not extend was lost to
// an operator's cancel rather than to an expiry.
func (s *Store) JobCancelled(ctx context.Context, leases []Lease) (map[int64]bool, error) {
	ids, tokens := splitLeases(leases)
	out := map[int64]bool{}
	err := s.planned(ctx, collectTokens(out), cancelledSQL, ids, tokens)
	return out, err
}

const cancelledSQL = `SELECT j.token FROM jobs j
		JOIN unnest($1::bigint[], $2::bigint[]) AS t(id, token) ON j.id = t.id AND j.token = t.token
		WHERE coalesce(j.state, '') = 'cancelled'`

// heldSQL is the test that a row j is still held under token t: written
// so that only the primary key can serve a batch's join on id. Spelled
// `j.state = 'running'`, it lets the planner read the batch through the
// partial index of running rows and filter every row of it by id: with
// statistics from a moment when nothing ran, it does (seen: 100 outcomes
// against 500 running rows, 50,000 comparisons and 26 ms per batch, and
// ordered throughput halved). The coalesce hides the state test from the
// partial indexes.
const heldSQL = `j.id = t.id AND j.token = t.token AND coalesce(j.state, '') = 'running'`

// heartbeatSQL hides the lease test from the planner as heldSQL hides the
// state's: statistics from before anything ran estimate it at one row,
// and the plan then read all of jobs (even for 1,000 ids). $5 is the
// holder whose shares of max_running cap the leases (slotLeaseCap).
var heartbeatSQL = `
		UPDATE jobs j SET lease_expires_at = least(now() + $3::bigint * interval '1 millisecond',
			j.started_at + $4::bigint * interval '1 millisecond', ` + slotLeaseCap("$5::text") + `)
		FROM unnest($1::bigint[], $2::bigint[]) AS t(id, token)
		WHERE ` + heldSQL + ` AND coalesce(j.lease_expires_at > now(), false)
		RETURNING j.token`

// Outcome is the end of one attempt.
type Outcome struct {
	ID    int64
	Token int64
	// State is succeeded, retrying or dead.
	State jobstate.State
	// Reason is the DLQ reason when State is dead: permanent | max_attempts.
	Reason string
	Error  string
	// Delay before the next attempt when State is retrying.
	Delay time.Duration
	// Lane is set for jobs of ordered routes: ending one advances its
	// lane. A success leaves jobs in the statement that records it, and
	// its lane advances from this (lanes_advance's p_gone), so it must be
	// the job's own, as its claim returned it (Claimed.LaneRef).
	Lane *LaneRef
	// Handoff, for a lane job, asks for the lane's next job to be handed
	// to the caller, claimed under this lease, if it belongs to the queue
	// named. Nil: the next job is queued for any pool to claim.
	Handoff *Handoff
	// Result and ResultType are kept with a success (nil: none).
	Result     []byte
	ResultType string
	// Span is the traceparent of the attempt's span, kept for the next
	// attempt's span to link to; "" (tracing off) keeps the last one.
	Span string
}

// LaneRef is a lane job's lane and version, as its outcome carries them.
type LaneRef struct {
	Route, Key string
	Version    *int64
}

// LaneRef returns the job's LaneRef; nil for a job outside lanes.
func (c *Claimed) LaneRef() *LaneRef {
	if !c.Lane {
		return nil
	}
	return &LaneRef{Route: c.Route, Key: c.Key, Version: c.Version}
}

// Handoff is what a pool asks of a lane's next job: its queue, and the
// lease the job is claimed under (the pool's lease, at most its
// max_runtime, as JobClaim leases).
type Handoff struct {
	Queue string
	Lease time.Duration
}

// Completed is what a batch of outcomes did.
type Completed struct {
	// Applied holds the tokens of the outcomes that were applied; the
	// others were stale (their lease was lost).
	Applied map[int64]bool
	// Next holds the jobs handed off (see Outcome.Handoff), running and
	// leased, by the id of the lane head each follows.
	Next map[int64]*Claimed
}

// JobComplete applies a batch of outcomes in ONE statement. Each row
// changes only if its fencing token still matches and it is still running
// (I4): a holder whose lease was lost changes nothing. Dead jobs get their
// DLQ entry in the same statement. Lanes whose head ended advance in the
// same transaction, handing their next job off where asked.
func (s *Store) JobComplete(ctx context.Context, outs []Outcome) (Completed, error) {
	// In id order, as splitLeases: see there.
	outs = slices.SortedFunc(slices.Values(outs), func(a, b Outcome) int { return cmp.Compare(a.ID, b.ID) })
	n := len(outs)
	ids, tokens := make([]int64, n), make([]int64, n)
	states, reasons, errs := make([]string, n), make([]string, n), make([]*string, n)
	delays := make([]int64, n)
	results, resultTypes := make([][]byte, n), make([]*string, n)
	// spans stays nil while no outcome has one (tracing off): NULL, which
	// unnest pads with NULLs, costs nothing.
	var spans []*string
	var ended, handoffs, leases []int64
	var queues []string
	var gone struct {
		ids      []int64
		routes   []string
		keys     []string
		versions []*int64
	}
	for i, o := range outs {
		ids[i], tokens[i], states[i], reasons[i], delays[i] = o.ID, o.Token, string(o.State), o.Reason, o.Delay.Milliseconds()
		if o.Error != "" {
			e := truncate(o.Error, maxErrorBytes)
			errs[i] = &e
		}
		if o.Result != nil && o.State == jobstate.Succeeded {
			results[i], resultTypes[i] = o.Result, &outs[i].ResultType
		}
		if o.Span != "" {
			if spans == nil {
				spans = make([]*string, n)
			}
			spans[i] = &outs[i].Span
		}
		if o.Lane != nil && o.State != jobstate.Retrying {
			// A success leaves jobs (keptSQL): lanes_advance learns of it
			// from gone, and only from there (see its comment).
			if o.State == jobstate.Succeeded {
				gone.ids, gone.routes = append(gone.ids, o.ID), append(gone.routes, o.Lane.Route)
				gone.keys, gone.versions = append(gone.keys, o.Lane.Key), append(gone.versions, o.Lane.Version)
			} else {
				ended = append(ended, o.ID)
			}
			if o.Handoff != nil {
				handoffs, queues = append(handoffs, o.ID), append(queues, o.Handoff.Queue)
				leases = append(leases, o.Handoff.Lease.Milliseconds())
			}
		}
	}
	// gone.ids never nil: see keptSQL.
	args := []any{ids, tokens, states, reasons, errs, delays, results, resultTypes, spans, append([]int64{}, gone.ids...)}
	c := Completed{Applied: make(map[int64]bool, n)}
	readApplied := collectTokens(c.Applied)
	if len(ended)+len(gone.ids) == 0 {
		if err := s.planned(ctx, readApplied, completeSQL, args...); err != nil {
			return Completed{}, err
		}
		return c, nil
	}
	// Heads end: their lanes advance set-based in the same transaction,
	// with the per-row trigger switched off for it (see 0002_lanes.sql).
	// One round trip: a batch runs as one implicit transaction, and
	// lanes_advance ignores the jobs whose outcome turns out stale.
	// The handed-off jobs count only once the batch has committed.
	b := &pgx.Batch{}
	b.Queue(planSQL)
	lanes := `SELECT set_config('switchyard.lanes_batched', 'on', true)`
	if len(handoffs) > 0 {
		lanes += ", " + tokenSQL
	}
	b.Queue(lanes)
	b.Queue(completeSQL, args...).Query(readApplied)
	b.Queue(`SELECT `+workerColumns+`, a.prev_id FROM lanes_advance($1, $2, $3, $4, p_gone_id => $5,
		p_gone_route => $6, p_gone_key => $7, p_gone_version => $8) a, LATERAL (SELECT (a.job).*) j`,
		ended, handoffs, queues, leases, gone.ids, gone.routes, gone.keys, gone.versions).Query(func(rows pgx.Rows) error {
		defer rows.Close()
		c.Next = map[int64]*Claimed{}
		var prev int64
		scan := newClaimedRows(&prev)
		for rows.Next() {
			j, err := scan.scan(rows)
			if err != nil {
				return err
			}
			c.Next[prev] = j
		}
		return rows.Err()
	})
	if err := s.pool.SendBatch(ctx, b).Close(); err != nil {
		return Completed{}, err
	}
	return c, nil
}

const completeSQL = `
		WITH o AS (
			SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::text[], $4::text[], $5::text[], $6::bigint[],
				$7::bytea[], $8::text[], $9::text[])
				AS t(id, token, state, reason, err, delay_ms, result, result_type, span)
		), m AS (
			-- The jobs that succeeded (keptSQL) leave jobs, kept as one
			-- job_history row of this batch (migration 0029).
			DELETE FROM jobs j USING o AS t
			WHERE ` + heldSQL + ` AND ` + keptSQL + `
			RETURNING job_as_view(j, 'succeeded', now(), t.result, t.result_type,
				coalesce(t.span, j.attempt_span)) AS job
		), u AS (
			UPDATE jobs j SET state = t.state,
				result = t.result, result_type = t.result_type,
				finished_at = CASE WHEN t.state = 'retrying' THEN NULL ELSE now() END,
				scheduled_at = CASE WHEN t.state = 'retrying'
					THEN now() + t.delay_ms * interval '1 millisecond' ELSE j.scheduled_at END,
				lease_expires_at = NULL, attempt_span = coalesce(t.span, j.attempt_span),
				last_error = coalesce(t.err, j.last_error),
				-- Each attempt's history entry is cut at 1024 characters on
				-- purpose: the history shows how the attempts failed, over
				-- up to max_attempts entries; last_error keeps the latest
				-- whole (maxErrorBytes).
				errors = CASE WHEN t.err IS NULL THEN j.errors ELSE j.errors || jsonb_build_array(
					jsonb_build_object('attempt', j.attempts, 'error', left(t.err, 1024), 'at', now())) END
			FROM o AS t
			-- Only what m did not take, so that a success is looked up
			-- once, not twice (ids are never NULL, so NOT IN is exact,
			-- and it filters o through a hash of m before any lookup).
			WHERE t.id NOT IN (SELECT (job).id FROM m) AND ` + heldSQL + ` AND NOT ` + keptSQL + `
			-- What the DLQ entry of a dead job needs; its bytes for dead
			-- jobs only, as no other row needs them.
			RETURNING j.id, j.token, j.state, j.route, j.queue, j.src_topic, j.src_partition, j.src_offset,
				j.attempts, j.last_error, j.errors, t.reason,
				CASE WHEN j.state = 'dead' THEN j.payload END AS payload,
				CASE WHEN j.state = 'dead' THEN j.header_keys END AS header_keys,
				CASE WHEN j.state = 'dead' THEN j.header_values END AS header_values
		), d AS (
			INSERT INTO dlq_entries (reason, route, queue, job_id, src_topic, src_partition, src_offset,
				attempts, last_error, errors, payload, header_keys, header_values)
			SELECT u.reason, u.route, u.queue, u.id, u.src_topic, u.src_partition, u.src_offset,
				u.attempts, coalesce(u.last_error, ''), u.errors, u.payload, u.header_keys, u.header_values
			FROM u WHERE u.state = 'dead'
			ON CONFLICT DO NOTHING
		), h AS (
			INSERT INTO job_history (ids, finished_at, n, queues, routes, jobs)
			SELECT int8range(min((job).id), max((job).id), '[]'), now(), count(*),
				array_agg(DISTINCT (job).queue), array_agg(DISTINCT (job).route), array_agg(job) FROM m
			HAVING count(*) > 0
		)
		SELECT token FROM u UNION ALL SELECT (job).token FROM m`

// keptSQL picks, in completeSQL, the outcomes whose job moves to
// job_history: a success, of a lane job only where $10 names it. Every
// other outcome updates its row in place: a retry runs again, and a dead
// job's row is what the DLQ and a re-drive work on.
//
// Why a lane job's success must be named: its lane advances from what
// JobComplete passes lanes_advance in the same transaction (p_gone), as
// its row is gone; the per-row trigger, which every other path relies on,
// fires on an update, not on a delete. A statement run without
// lanes_advance names none, and its lane successes update in place, for
// the trigger. The coalesce keeps a NULL array from making an outcome
// neither kept nor updated.
const keptSQL = `(t.state = 'succeeded' AND (NOT j.lane OR coalesce(j.id = ANY($10::bigint[]), false)))`

// collectTokens reads a statement's one column of tokens into set.
func collectTokens(set map[int64]bool) func(pgx.Rows) error {
	return func(rows pgx.Rows) error {
		var token int64
		_, err := pgx.ForEachRow(rows, []any{&token}, func() error { set[token] = true; return nil })
		return err
	}
}

// Rescued is what one JobRescue did.
type Rescued struct {
	// Retried counts by kind the jobs whose lease expired that went back
	// to their queue (switchyard_job_attempts_total's lease_lost, counted
	// once fleet-wide: by the process that rescued them).
	Retried map[string]int64
	// Dead are those that were out of attempts, parked: their attempt
	// ended the job, as a pool's last failed attempt does (outcome dead).
	Dead []DeadJob
	// Expired counts queued jobs past their deadline, by kind.
	Expired map[string]int64
}

// DeadJob is a job that a rescue parked (reason max_attempts).
type DeadJob struct {
	ID          int64
	Kind, Queue string
	Attempts    int
}

// LeaseExpired is the error of an attempt whose lease expired, in its
// job's errors and in the span that stands for it.
const LeaseExpired = "lease expired: worker lost or stalled"

// LostAttempt is an attempt whose lease expired, as JobRescue finds it:
// what a span of it needs, and no more (not its payload, which may be
// large, for each of up to a rescue's limit of jobs).
type LostAttempt struct {
	ID                 int64
	Kind, Queue, Route string
	Attempt            int
	StartedAt          time.Time
	// Traceparent is the value of the job's first traceparent header
	// (its name in any case, as the attempt reads it), nil without one.
	Traceparent []byte
	// AttemptSpan is the span context of the last attempt that recorded
	// one (Claimed.AttemptSpan).
	AttemptSpan string
}

// JobRescue returns running jobs whose lease expired (their worker died or
// stalled) to retrying, or to dead with a DLQ entry when they have used
// all their attempts (I5), and expires queued jobs past their deadline.
// Batched and SKIP LOCKED so every process can run it at once.
//
// spans, when not nil, is handed the attempts whose leases expired, in
// the rescue's transaction, and returns for each the span context that
// stands for it ("" for none): stored as the job's attempt_span, so that
// the next attempt links to it. A process that died never recorded its
// attempt's own.
func (s *Store) JobRescue(ctx context.Context, limit int, spans func([]LostAttempt) []string) (Rescued, error) {
	var r Rescued
	var retriedKinds, expiredKinds, deadKinds, deadQueues []string
	var retried, expired, deadIDs []int64
	var deadAttempts []int
	rescue := func(q pgx.Row) error {
		return q.Scan(&deadIDs, &deadKinds, &deadQueues, &deadAttempts,
			&retriedKinds, &retried, &expiredKinds, &expired)
	}
	var err error
	if spans == nil {
		err = rescue(s.pool.QueryRow(ctx, rescueSQL, limit, nil, nil, LeaseExpired))
	} else {
		err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			attempts, err := lostAttempts(ctx, tx, limit)
			if err != nil {
				return err
			}
			ids := make([]int64, len(attempts)) // not nil: only these are rescued
			for i, a := range attempts {
				ids[i] = a.ID
			}
			var ctxs []string
			if len(attempts) > 0 {
				ctxs = spans(attempts)
			}
			return rescue(tx.QueryRow(ctx, rescueSQL, limit, ids, ctxs, LeaseExpired))
		})
	}
	if err != nil {
		return Rescued{}, err
	}
	r.Retried, r.Expired = byKind(retriedKinds, retried), byKind(expiredKinds, expired)
	for i, id := range deadIDs {
		r.Dead = append(r.Dead, DeadJob{ID: id, Kind: deadKinds[i], Queue: deadQueues[i], Attempts: deadAttempts[i]})
	}
	return r, nil
}

// byKind pairs a statement's kinds with their counts; nil for none.
func byKind(kinds []string, n []int64) map[string]int64 {
	if len(kinds) == 0 {
		return nil
	}
	m := make(map[string]int64, len(kinds))
	for i, kind := range kinds {
		m[kind] = n[i]
	}
	return m
}

// lostAttempts locks and reads the running jobs whose lease expired, as
// rescueSQL picks them.
func lostAttempts(ctx context.Context, tx pgx.Tx, limit int) ([]LostAttempt, error) {
	rows, err := tx.Query(ctx, `
		SELECT j.id, j.kind, j.queue, j.route, j.attempts, coalesce(j.started_at, j.lease_expires_at),
			-- tracing.HeaderName, in any case: the first, as an attempt reads it.
			(SELECT h.v FROM unnest(j.header_keys, j.header_values) AS h(k, v) WHERE lower(h.k) = 'traceparent' LIMIT 1),
			coalesce(j.attempt_span, '')
		FROM jobs j
		WHERE j.state = 'running' AND j.lease_expires_at < now()
		ORDER BY j.lease_expires_at LIMIT $1 FOR UPDATE OF j SKIP LOCKED`, limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (LostAttempt, error) {
		var a LostAttempt
		err := r.Scan(&a.ID, &a.Kind, &a.Queue, &a.Route, &a.Attempt, &a.StartedAt, &a.Traceparent, &a.AttemptSpan)
		return a, err
	})
}

// rescueSQL: $1 at most so many of each, $2 the ids of the expired leases
// to rescue (NULL: any), $3 the span context of each ($2's order; "" for
// none), $4 the error (LeaseExpired).
const rescueSQL = `
		WITH x AS (
			SELECT id FROM jobs WHERE state = 'running' AND lease_expires_at < now()
			  AND ($2::bigint[] IS NULL OR id = ANY($2::bigint[]))
			ORDER BY lease_expires_at LIMIT $1 FOR UPDATE SKIP LOCKED
		), u AS (
			UPDATE jobs j SET
				state = CASE WHEN j.attempts >= j.max_attempts THEN 'dead' ELSE 'retrying' END,
				finished_at = CASE WHEN j.attempts >= j.max_attempts THEN now() END,
				scheduled_at = now(), lease_expires_at = NULL,
				last_error = $4::text,
				errors = j.errors || jsonb_build_array(jsonb_build_object('attempt', j.attempts,
					'error', $4::text, 'at', now())),
				attempt_span = coalesce(nullif(s.span, ''), j.attempt_span)
			FROM x LEFT JOIN unnest($2::bigint[], $3::text[]) AS s(id, span) ON s.id = x.id
			WHERE j.id = x.id
			RETURNING j.*
		), d AS (
			INSERT INTO dlq_entries (reason, route, queue, job_id, src_topic, src_partition, src_offset,
				attempts, last_error, errors, payload, header_keys, header_values)
			SELECT 'max_attempts', u.route, u.queue, u.id, u.src_topic, u.src_partition, u.src_offset,
				u.attempts, u.last_error, u.errors, u.payload, u.header_keys, u.header_values
			FROM u WHERE u.state = 'dead'
			ON CONFLICT DO NOTHING
		), e AS (
			UPDATE jobs j SET state = 'expired', finished_at = now(), last_error = 'deadline passed before start'
			WHERE j.id IN (SELECT id FROM jobs WHERE deadline IS NOT NULL AND state IN ('queued', 'retrying')
				AND deadline < now() LIMIT $1 FOR UPDATE SKIP LOCKED)
			RETURNING j.kind
		), rk AS (
			SELECT kind, count(*) AS n FROM u WHERE state = 'retrying' GROUP BY kind
		), ek AS (
			SELECT kind, count(*) AS n FROM e GROUP BY kind
		)
		SELECT coalesce(array_agg(id), '{}'), coalesce(array_agg(kind), '{}'), coalesce(array_agg(queue), '{}'),
				coalesce(array_agg(attempts), '{}'),
			coalesce((SELECT array_agg(kind) FROM rk), '{}'), coalesce((SELECT array_agg(n) FROM rk), '{}'),
			coalesce((SELECT array_agg(kind) FROM ek), '{}'), coalesce((SELECT array_agg(n) FROM ek), '{}')
		FROM (SELECT id, kind, queue, attempts FROM u WHERE state = 'dead' ORDER BY id) dead`

// JobRelease gives unfinished jobs back to their queue at shutdown (I7).
// The attempt is handed back too: a deploy is not the job's fault.
func (s *Store) JobRelease(ctx context.Context, leases []Lease) (int64, error) {
	var n int64
	for ids, tokens := range leaseChunks(leases) {
		released, err := s.plannedExec(ctx, releaseSQL, ids, tokens)
		if err != nil {
			return n, err
		}
		n += released
	}
	return n, nil
}

const releaseSQL = `
		UPDATE jobs j SET state = 'queued', scheduled_at = now(), lease_expires_at = NULL,
			started_at = NULL, attempts = greatest(j.attempts - 1, 0)
		FROM unnest($1::bigint[], $2::bigint[]) AS t(id, token)
		WHERE ` + heldSQL

// splitLeases returns the leases' ids and tokens in id order: every batch
// that locks job rows (heartbeat, completion, release) locks them in the
// same order, so that two of them holding overlapping jobs cannot deadlock
// (seen: a heartbeat and a completion batch of the same pool).
func splitLeases(ls []Lease) ([]int64, []int64) {
	ls = slices.SortedFunc(slices.Values(ls), func(a, b Lease) int { return cmp.Compare(a.ID, b.ID) })
	ids, tokens := make([]int64, len(ls)), make([]int64, len(ls))
	for i, l := range ls {
		ids[i], tokens[i] = l.ID, l.Token
	}
	return ids, tokens
}

// maxErrorBytes bounds an attempt's error as a job's last_error (and its
// DLQ entry's) keeps it: room for the first 4 KiB of an HTTP target's
// error body (SPEC §5) with the text around it (permanent:, the status
// line, a retry's note), and for invalid bytes in that body shown as
// U+FFFD; beyond it a handler's error cannot swell the row.
const maxErrorBytes = 8 << 10

// truncate cuts s to at most n bytes on a rune boundary and drops
// invalid UTF-8, which Postgres text would reject (and with it the whole
// batch of outcomes).
func truncate(s string, n int) string {
	if len(s) > n {
		s = s[:n]
	}
	return strings.ToValidUTF8(strings.ReplaceAll(s, "\x00", ""), "")
}

// JobCancel cancels a job that has not finished. A running job's lease is
// thereby lost: its next heartbeat cancels the handler, and its completion
// is rejected.
//
// The cancelled attempt of a running job is counted here, in the cancel's
// transaction (outcome_tally, which the processes' samplers take into
// switchyard_job_attempts_total{outcome="cancelled"}), not by the
// attempt's process: that one may have died, or its handler returned
// before the cancel reached it and its completion was rejected, and a
// cancel from the CLI runs in no serving process at all.
func (s *Store) JobCancel(ctx context.Context, id int64, by string) error {
	failed, _, err := s.jobsCancel(ctx, []int64{id}, by)
	if err != nil {
		return err
	}
	return failed[id]
}

// finishedError is the ErrConflict of an action on a job that has
// finished, said as the job's own answer ("job 5 has finished already
// (dead)"): the API's 409 and the CLI show it as it is, so that who asked
// learns what became of the job, not only that it was in some other
// state.
type finishedError struct {
	id    int64
	state jobstate.State
}

func (e finishedError) Error() string {
	return fmt.Sprintf("job %d has finished already (%s): only a job that has not finished can be cancelled", e.id, e.state)
}

func (e finishedError) Is(target error) bool { return target == ErrConflict }

// NotWaiting says why JobRetryNow refused job id with ErrConflict, to
// whoever asked (the API, the CLI).
func NotWaiting(id int64) string {
	return fmt.Sprintf("job %d is not waiting for its time (retrying or delayed): nothing to run now", id)
}

// JobRetryNow makes a job that waits for its time — a retry's backoff,
// or a run_at or delay — runnable now, for by, and wakes its queue. A job
// in any other state is ErrConflict.
func (s *Store) JobRetryNow(ctx context.Context, id int64, by string) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var queue string
		var was time.Time
		err := tx.QueryRow(ctx, `
			WITH old AS (SELECT id, scheduled_at FROM jobs WHERE id = $1 AND state IN ('queued', 'retrying')
				AND scheduled_at > now() FOR UPDATE)
			UPDATE jobs j SET scheduled_at = now() FROM old WHERE j.id = old.id
			RETURNING j.queue, old.scheduled_at`, id).Scan(&queue, &was)
		if errors.Is(err, pgx.ErrNoRows) {
			var exists bool
			if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM jobs_by_id(ARRAY[$1::bigint]))`, id).Scan(&exists); err != nil {
				return err
			}
			if !exists {
				return ErrNotFound
			}
			return ErrConflict
		}
		if err != nil {
			return err
		}
		if err := audit(ctx, tx, by, AuditRetry, fmt.Sprintf("job/%d", id), map[string]any{"was_scheduled_at": was}); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `SELECT pg_notify($1, $2)`, s.Channel(), queue)
		return err
	})
}

// JobPrune deletes up to limit jobs that finished in state before the
// given age, oldest first, and for succeeded jobs whole batches of
// job_history after them (the last may take it past limit). Dead jobs
// with a parked DLQ entry are kept: the entry is the operator's to
// re-drive or discard. The re-driven entries of a pruned job go with it:
// they are its history. Deleting a job frees its dedupe key, so the
// retention of a state is also the window in which a replay is
// deduplicated against it.
func (s *Store) JobPrune(ctx context.Context, state string, olderThan time.Duration, limit int) (int64, error) {
	var n int64
	err := s.pool.QueryRow(ctx, pruneJobsSQL, state, olderThan.Milliseconds(), limit).Scan(&n)
	if err != nil || n >= int64(limit) || state != string(jobstate.Succeeded) {
		return n, err
	}
	var kept int64
	err = s.pool.QueryRow(ctx, pruneHistorySQL, olderThan.Milliseconds(), limit-int(n)).Scan(&kept)
	return n + kept, err
}

// pruneJobsSQL deletes up to $3 jobs of state $1 that finished over $2 ms
// ago; pruneHistorySQL the oldest batches of job_history that finished
// over $1 ms ago, until they held $2 jobs.
const (
	pruneJobsSQL = `
		WITH d AS (
			DELETE FROM jobs WHERE id IN (
				SELECT j.id FROM jobs j
				WHERE j.state = $1 AND j.finished_at < now() - $2::bigint * interval '1 millisecond'
				  AND NOT EXISTS (SELECT 1 FROM dlq_entries d WHERE d.job_id = j.id AND d.redriven_at IS NULL)
				ORDER BY j.finished_at LIMIT $3
				FOR UPDATE SKIP LOCKED)
			RETURNING id
		)` + prunedSQL
	pruneHistorySQL = `
		WITH b AS (
			DELETE FROM job_history WHERE ctid IN (
				SELECT ctid FROM (
					SELECT ctid, sum(n) OVER (ORDER BY finished_at, ctid ROWS UNBOUNDED PRECEDING) - n AS before
					FROM (SELECT ctid, finished_at, n FROM job_history
						WHERE finished_at < now() - $1::bigint * interval '1 millisecond'
						ORDER BY finished_at LIMIT $2 FOR UPDATE SKIP LOCKED) oldest) x
				WHERE before < $2)
			RETURNING jobs
		), d AS (
			SELECT r.id FROM b, unnest(b.jobs) r
		)` + prunedSQL
)

// prunedSQL ends a prune whose CTE d holds the ids of the jobs deleted:
// their job_keys rows go with them (a dedupe key is held as long as its
// job is retained), so do their re-drives' DLQ entries, and the entries
// they were revived from forget them, as a foreign key's ON DELETE SET
// NULL did before job_history (migration 0029).
const prunedSQL = `, k AS (
			DELETE FROM job_keys WHERE job_id IN (SELECT id FROM d)
		), h AS (
			DELETE FROM dlq_entries WHERE redrive_job_id IN (SELECT id FROM d)
		), r AS (
			UPDATE dlq_entries SET job_id = NULL WHERE job_id IN (SELECT id FROM d)
			  AND (redrive_job_id IS NULL OR redrive_job_id NOT IN (SELECT id FROM d))
		)
		SELECT count(*) FROM d`
