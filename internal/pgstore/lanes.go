package pgstore

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/switchyard-dev/switchyard/jobstate"
)

var (
	// ErrLeaseLost means the job is no longer held under the given token.
	ErrLeaseLost = errors.New("lease lost: the job is no longer held under this token")
	// ErrStale means the job's version is not newer than its lane's last
	// applied version; the job was marked skipped instead of applied.
	ErrStale = errors.New("stale version: not newer than the last applied version")
	// ErrRecordEntry means a DLQ entry is a record that never became a
	// job: it needs decoding again, not a state change.
	ErrRecordEntry = errors.New("the entry is a record that never became a job")
	// ErrRedriven means a DLQ entry was re-driven already: its job, not
	// the entry, is what to act on now. It is an ErrConflict.
	ErrRedriven = fmt.Errorf("%w: re-driven already", ErrConflict)
	// ErrRefused means Postgres refused a job for its data (a value that
	// decoding did not foresee); the record stays parked.
	ErrRefused = errors.New("refused by Postgres for its data")
)

// redrivenError is ErrRedriven for one entry, said as the entry's own
// answer ("entry 5 was re-driven already, to job 41"): an API client and
// an operator read it as it is, without the sentinels' words before it.
type redrivenError struct{ entry, job int64 }

func (e redrivenError) Error() string {
	return fmt.Sprintf("entry %d was re-driven already, to job %d", e.entry, e.job)
}

func (e redrivenError) Is(target error) bool { return target == ErrRedriven || target == ErrConflict }

// LaneSweepGaps retries promotion of strict lanes whose gap has waited
// out its gap_timeout, so they park or proceed. Batched; every process
// may run it.
func (s *Store) LaneSweepGaps(ctx context.Context, limit int) (int64, error) {
	tag, err := s.pool.Exec(ctx, `
		SELECT lane_promote(route, key) FROM (
			SELECT route, key FROM lanes
			WHERE gap_since IS NOT NULL AND gap_since + gap_timeout <= now()
			ORDER BY route, key LIMIT $1
		) g`, limit)
	return tag.RowsAffected(), err
}

// LaneKey names a lane.
type LaneKey struct{ Route, Key string }

// LanePrune deletes, among the page of up to page lanes after after in
// (route, key) order, the lanes that hold nothing: no head, not blocked,
// no strict gap, no waiting job, and no version (policy none, or no
// version applied or passed yet). Without it a lane row stays for every
// key an ordered route has ever seen. A job that joins a pruned lane
// makes it again: ingest and enqueue by lanes_upsert, a re-run or a
// re-drive by lane_promote. It returns the page's last lane, to pass as
// after next time, or nil when the page reached the end of the table, and
// how many lanes it pruned, and promoted: an idle lane (no head) whose
// jobs wait is given its next head instead.
//
// An idle versioned lane keeps its last applied version, which a late
// record is measured against (and a strict lane the version it passed
// unapplied, which the next it waits for follows), for versions
// (retention.versions; 0: for good). Its version, for this, is the
// greater of the two. The first prune that finds it idle stamps it with
// the time and the version (lanes.idle_since, idle_version); a prune that
// finds it idle with that same version more than versions later deletes
// it, and a version applied in between makes the next prune stamp it
// again. So a lane forgets its version at least versions after it last
// changed, and a record older than that then runs as its key's first. A
// stamped lane that is not due is not even locked (a row lock writes the
// row).
//
// Safe beside every path that adds a job to a lane: the idle lanes are
// locked first (SKIP LOCKED: a lane some transaction holds is not idle
// for long), and their waiting jobs are looked for in a statement after
// the lock, so a job committed by then keeps its lane; a transaction that
// adds one later waits for the lock and finds the row gone, and makes it
// again (lanes/doc.go).
func (s *Store) LanePrune(ctx context.Context, after LaneKey, page int, versions time.Duration) (next *LaneKey, pruned, promoted int64, err error) {
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var n int
		var last LaneKey
		if err := tx.QueryRow(ctx, `
			SELECT count(*), coalesce((array_agg(route ORDER BY route DESC, key DESC))[1], ''),
				coalesce((array_agg(key ORDER BY route DESC, key DESC))[1], '')
			FROM (SELECT route, key FROM lanes WHERE (route, key) > ($1, $2) ORDER BY route, key LIMIT $3) p`,
			after.Route, after.Key, page).Scan(&n, &last.Route, &last.Key); err != nil {
			return err
		}
		if n == 0 {
			return nil
		}
		if n == page {
			next = &last
		}
		// A versioned lane only when there is something to do: to stamp
		// it, or to prune it. A row lock is a write of the row, and a
		// stamped lane waits out retention.versions over many passes.
		rows, err := tx.Query(ctx, `
			SELECT route, key FROM lanes
			WHERE (route, key) > ($1, $2) AND (route, key) <= ($3, $4)
			  AND head_job_id IS NULL AND NOT blocked AND gap_since IS NULL
			  AND (policy = 'none' OR greatest(last_version, passed_version) IS NULL
			       OR ($5::bigint > 0 AND (idle_version IS DISTINCT FROM greatest(last_version, passed_version)
			                               OR idle_since <= now() - $5::bigint * interval '1 millisecond')))
			FOR UPDATE SKIP LOCKED`, after.Route, after.Key, last.Route, last.Key, versions.Milliseconds())
		if err != nil {
			return err
		}
		var routes, keys []string
		var route, key string
		if _, err := pgx.ForEachRow(rows, []any{&route, &key}, func() error {
			routes, keys = append(routes, route), append(keys, key)
			return nil
		}); err != nil || len(routes) == 0 {
			return err
		}
		// A statement of its own: its snapshot is taken after the locks.
		// A lane with no head whose jobs wait is promoted instead: one that
		// lanes_advance freed as the job it was promoting was cancelled (the
		// next ingest into the lane would promote past it, but a key may
		// get no other record).
		// A versioned lane is deleted or stamped, never both: the two
		// statements' conditions on idle_version exclude each other.
		return tx.QueryRow(ctx, `
			WITH idle AS (
				SELECT u.route, u.key,
					EXISTS (SELECT 1 FROM jobs j WHERE j.route = u.route AND j.key = u.key AND j.state = 'waiting') AS waits
				FROM unnest($1::text[], $2::text[]) AS u(route, key)
			), pruned AS (
				DELETE FROM lanes l USING idle u
				WHERE l.route = u.route AND l.key = u.key AND NOT u.waits
				  AND (l.policy = 'none' OR greatest(l.last_version, l.passed_version) IS NULL
				       OR (l.idle_version = greatest(l.last_version, l.passed_version) AND l.idle_since <= now() - $3::bigint * interval '1 millisecond'))
				RETURNING 1
			), stamped AS (
				UPDATE lanes l SET idle_since = now(), idle_version = greatest(l.last_version, l.passed_version)
				FROM idle u
				WHERE l.route = u.route AND l.key = u.key AND NOT u.waits
				  AND l.policy <> 'none' AND greatest(l.last_version, l.passed_version) IS NOT NULL
				  AND l.idle_version IS DISTINCT FROM greatest(l.last_version, l.passed_version)
			), stuck AS (
				SELECT lane_promote(u.route, u.key) FROM idle u WHERE u.waits ORDER BY u.route, u.key
			)
			SELECT (SELECT count(*) FROM pruned), (SELECT count(*) FROM stuck)`,
			routes, keys, versions.Milliseconds()).Scan(&pruned, &promoted)
	})
	if err != nil {
		return nil, 0, 0, err
	}
	return next, pruned, promoted, nil
}

// LaneBlocked counts lanes held by a dead head (on_dead: block), by route.
func (s *Store) LaneBlocked(ctx context.Context) (map[string]int64, error) {
	rows, err := s.pool.Query(ctx, `SELECT route, count(*) FROM lanes WHERE blocked GROUP BY route`)
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	var r string
	var n int64
	_, err = pgx.ForEachRow(rows, []any{&r, &n}, func() error { out[r] = n; return nil })
	return out, err
}

// LaneRow is one lane as GET /v1/lanes shows it: its head (the job that
// is queued, running, retrying, or dead and blocking it) and how many
// jobs wait behind it, and since when the oldest has.
type LaneRow struct {
	Route                   string          `json:"route"`
	Key                     string          `json:"key"`
	HeadJobID               *int64          `json:"head_job_id"`
	HeadState               *jobstate.State `json:"head_state"`
	Blocked                 bool            `json:"blocked"`
	Waiting                 int64           `json:"waiting"`
	OldestWaitingAgeSeconds float64         `json:"oldest_waiting_age_seconds"`
}

// LaneFilter selects LaneList's lanes: those of Route ("": all), only the
// blocked ones if BlockedOnly, after After (nil: from the first), at most
// Limit.
type LaneFilter struct {
	Route       string
	BlockedOnly bool
	After       *LanePlace
	Limit       int
}

// LanePlace is where a lane stands in LaneList's order: blocked lanes
// first, then by waiting jobs, most first, then by route and key. A page
// resumes after the place of the previous page's last lane (keyset
// pagination); the counts move as jobs run, so a lane whose count changed
// between two pages may show on both, or on neither.
type LanePlace struct {
	Blocked    bool
	Waiting    int64
	Route, Key string
}

// LaneList returns the lanes an operator looks at: the blocked ones and
// (unless f.BlockedOnly) those with waiting jobs, in LanePlace's order.
// The waiting jobs are counted by reading their partial index once; only
// the page's lanes have their heads read.
func (s *Store) LaneList(ctx context.Context, f LaneFilter) ([]LaneRow, error) {
	var after LanePlace
	if f.After != nil {
		after = *f.After
	}
	rows, err := s.pool.Query(ctx, `
		WITH w AS (
			SELECT route, key, count(*) AS waiting, min(created_at) AS oldest FROM jobs
			WHERE state = 'waiting' AND ($1::text IS NULL OR route = $1) GROUP BY route, key
		), c AS (
			SELECT coalesce(b.route, w.route) AS route, coalesce(b.key, w.key) AS key, b.key IS NOT NULL AS blocked,
				coalesce(w.waiting, 0) AS waiting, w.oldest
			FROM (SELECT route, key FROM lanes WHERE blocked AND ($1::text IS NULL OR route = $1)) b
				FULL JOIN w ON w.route = b.route AND w.key = b.key
			WHERE b.key IS NOT NULL OR NOT $3
		), p AS (
			SELECT * FROM c
			WHERE NOT $4 OR (NOT c.blocked, -c.waiting, c.route, c.key) > (NOT $5, -$6::bigint, $7::text, $8::text)
			ORDER BY c.blocked DESC, c.waiting DESC, c.route, c.key
			LIMIT $2
		)
		SELECT p.route, p.key, l.head_job_id, j.state, p.blocked, p.waiting,
			coalesce(extract(epoch FROM now() - p.oldest), 0)::float8
		FROM p LEFT JOIN lanes l ON l.route = p.route AND l.key = p.key LEFT JOIN jobs j ON j.id = l.head_job_id
		ORDER BY p.blocked DESC, p.waiting DESC, p.route, p.key`,
		nullable(f.Route), f.Limit, f.BlockedOnly, f.After != nil, after.Blocked, after.Waiting, after.Route, after.Key)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowToStructByPos[LaneRow])
}

// JobApply runs fn in a transaction that also completes job id, so that
// a handler's own writes and the job's success commit together or not at
// all (SPEC §8). The job must still be held under token. For a versioned
// lane whose last applied version is not older than the job's version,
// fn is not called, the job ends skipped and ErrStale is returned.
func (s *Store) JobApply(ctx context.Context, id, token int64, version *int64, fn func(ctx context.Context, tx pgx.Tx) error) error {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx) //nolint:errcheck // a no-op after Commit
	var state jobstate.State
	var policy string
	var last *int64
	err = tx.QueryRow(ctx, `
		SELECT j.state, coalesce(l.policy, 'none'), l.last_version
		FROM jobs j LEFT JOIN lanes l ON j.lane AND l.route = j.route AND l.key = j.key
		WHERE j.id = $1 AND j.token = $2
		FOR UPDATE OF j`, id, token).Scan(&state, &policy, &last)
	if errors.Is(err, pgx.ErrNoRows) || (err == nil && state != jobstate.Running) {
		return ErrLeaseLost
	}
	if err != nil {
		return err
	}
	// One job per lane runs at a time (I3), so last_version cannot move
	// under us between this check and the commit.
	if policy != "none" && last != nil && version != nil && *version <= *last {
		if _, err := tx.Exec(ctx, `UPDATE jobs SET state = 'skipped', finished_at = now(), lease_expires_at = NULL,
			last_error = 'version not newer than the last applied version' WHERE id = $1`, id); err != nil {
			return err
		}
		if err := tx.Commit(ctx); err != nil {
			return err
		}
		return ErrStale
	}
	if err := fn(ctx, tx); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, `UPDATE jobs SET state = 'succeeded', finished_at = now(), lease_expires_at = NULL
		WHERE id = $1`, id); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// DLQRedrive puts a dead job back with fresh attempts: the blocked head
// of a lane runs again in place; any other lane job rejoins its lane's
// (version, offset) order; an unordered job is runnable at once. The DLQ
// entry stays, marked re-driven by `by` (redrivenSQL), and the audit log
// records it, in the same transaction. It returns the job id.
func (s *Store) DLQRedrive(ctx context.Context, entryID int64, by string) (int64, error) {
	var jobID int64
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		id, err := lockEntry(ctx, tx, entryID)
		if err != nil {
			return err
		}
		// As a bulk re-drive's chunk takes it, of one entry.
		failed, _, err := dlqChunk(ctx, tx, true, []int64{entryID}, by)
		if err == nil {
			err = failed[entryID]
		}
		jobID = id
		return err
	})
	if err != nil {
		return 0, err
	}
	return jobID, nil
}

// putBackSQL is the SET list of a finished job aliased j put back to run
// again with fresh attempts (a re-drive, a re-run): an unordered job, and
// a lane's head (a blocked dead one), become queued; any other job of a
// lane rejoins its lane's order as waiting, for lane_promote.
const putBackSQL = `attempts = 0, scheduled_at = now(), finished_at = NULL, started_at = NULL, lease_expires_at = NULL,
	state = CASE WHEN NOT j.lane OR EXISTS (SELECT 1 FROM lanes l
		WHERE l.route = j.route AND l.key = j.key AND l.head_job_id = j.id) THEN 'queued' ELSE 'waiting' END`

// DLQDiscard removes an entry for good. A dead job stays dead; if it was
// blocking its lane, the lane moves on to its next job. An entry
// re-driven already is ErrRedriven, as for a re-drive (lockEntry).
func (s *Store) DLQDiscard(ctx context.Context, entryID int64, by string) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		id, err := lockEntry(ctx, tx, entryID)
		if err != nil && !errors.Is(err, ErrRecordEntry) {
			return err
		}
		if err == nil {
			// A dead head that blocked its lane leaves it (lanes_advance).
			if _, err := tx.Exec(ctx, `SELECT lanes_advance(ARRAY[$1::bigint], p_discarded => ARRAY[$1::bigint])`, id); err != nil {
				return err
			}
		}
		// The entry goes, as a bulk discard's chunk takes it; its audit
		// entry is what is left of it, so it says what was dropped. An
		// entry missing or re-driven already, lockEntry has answered for.
		_, _, err = dlqChunk(ctx, tx, false, []int64{entryID}, by)
		return err
	})
}

// RecordRedrive is a parked record's entry and the job that its record
// decodes to now (decoded again by the caller, e.g. after a route fix).
type RecordRedrive struct {
	Entry int64
	Job   NewJob
}

// DLQRedriveRecords turns parked records into jobs and marks each entry
// re-driven to its job, in one transaction, as ingest stores a batch (the
// lanes promoted, a coalescing route's older unstarted jobs of the key
// ended): jobs are the entries' job ids. An existing job with the same dedupe key
// wins (I2). An entry it cannot re-drive is in failed and stays as it was:
// gone (ErrNotFound), re-driven already (ErrRedriven), or not a record's
// (ErrConflict). A job Postgres refuses for its data is, for a single
// entry, its failure, wrapping ErrRefused; among several it fails the
// whole transaction (an error wrapping ErrRefused), so that each can be
// taken again alone and answer for itself.
func (s *Store) DLQRedriveRecords(ctx context.Context, rs []RecordRedrive, by string) (jobs map[int64]int64, failed map[int64]error, err error) {
	if by == "" {
		return nil, nil, errNoActor
	}
	jobs, failed = map[int64]int64{}, map[int64]error{}
	if len(rs) == 0 {
		return jobs, failed, nil
	}
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		// As a chunk's statements, by primary key and the dedupe index
		// whatever the statistics: on those of a table a few thousand
		// rows long, the job ids' lookup read all of job_keys.
		if _, err := tx.Exec(ctx, planSQL); err != nil {
			return err
		}
		take, err := lockRecordEntries(ctx, tx, rs, failed)
		if err != nil || len(take) == 0 {
			return err
		}
		newJobs := make([]NewJob, len(take))
		for i, r := range take {
			newJobs[i] = r.Job
		}
		var res IngestResult
		refused, err := insertJobs(ctx, tx, newJobs, &res)
		switch {
		case err != nil:
			return err
		case len(refused) > 0 && len(take) == 1:
			failed[take[0].Entry] = fmt.Errorf("%w: %s (SQLSTATE %s)", ErrRefused, refused[0].err.Message, refused[0].err.Code)
			return nil
		case len(refused) > 0:
			return fmt.Errorf("%w: %d of %d jobs", ErrRefused, len(refused), len(take))
		}
		b := &pgx.Batch{}
		queueLanesAndCoalesce(b, newJobs, newJobs, false, &res)
		if err := sendBatch(ctx, tx, b); err != nil {
			return err
		}
		// Each job's id by its dedupe key: the job inserted, or the one
		// that held the key already.
		routes, origins, dedupes := make([]string, len(take)), make([]string, len(take)), make([]string, len(take))
		for i, j := range newJobs {
			routes[i], origins[i], dedupes[i] = j.Route, j.origin(), j.DedupeKey
		}
		entries, ids := make([]int64, len(take)), make([]int64, len(take))
		rows, _ := tx.Query(ctx, recordJobIDsSQL, routes, origins, dedupes)
		var n, id int64
		if _, err := pgx.ForEachRow(rows, []any{&n, &id}, func() error {
			entries[n-1], ids[n-1] = take[n-1].Entry, id
			jobs[take[n-1].Entry] = id
			return nil
		}); err != nil {
			return err
		}
		if len(jobs) != len(take) {
			return fmt.Errorf("re-drive records: %d of %d jobs found by their dedupe keys", len(jobs), len(take))
		}
		if _, err := tx.Exec(ctx, `WITH `+redrivenSQL(`SELECT * FROM unnest($1::bigint[], $3::bigint[])`)+` SELECT count(*) FROM marked`,
			entries, by, ids); err != nil {
			return err
		}
		if len(res.Queues) > 0 {
			_, err = tx.Exec(ctx, notifySQL, s.Channel(), res.Queues)
		}
		return err
	})
	if err != nil {
		return nil, nil, err
	}
	return jobs, failed, nil
}

// recordJobIDsSQL is the job id of each (route $1, origin $2, dedupe key
// $3), by its position n (from 1).
const recordJobIDsSQL = `SELECT u.n, k.job_id
	FROM unnest($1::text[], $2::text[], $3::text[]) WITH ORDINALITY AS u(route, origin, dedupe_key, n)
	JOIN job_keys k USING (route, origin, dedupe_key)`

// lockRecordEntriesSQL locks entries $1 in id order.
const lockRecordEntriesSQL = `SELECT id, job_id, redrive_job_id FROM dlq_entries WHERE id = ANY($1::bigint[]) ORDER BY id FOR UPDATE`

// lockRecordEntries locks the entries of rs in id order and returns those
// that are still parked records, each as lockEntry says of one; the others
// go to failed.
func lockRecordEntries(ctx context.Context, tx pgx.Tx, rs []RecordRedrive, failed map[int64]error) ([]RecordRedrive, error) {
	ids := make([]int64, len(rs))
	for i, r := range rs {
		ids[i] = r.Entry
	}
	rows, _ := tx.Query(ctx, lockRecordEntriesSQL, ids)
	var id int64
	var job, redriven *int64
	parked := map[int64]bool{}
	if _, err := pgx.ForEachRow(rows, []any{&id, &job, &redriven}, func() error {
		switch {
		case redriven != nil:
			failed[id] = redrivenError{id, *redriven}
		case job != nil:
			failed[id] = ErrConflict
		default:
			parked[id] = true
		}
		return nil
	}); err != nil {
		return nil, err
	}
	var take []RecordRedrive
	for _, r := range rs {
		switch {
		case parked[r.Entry]:
			take = append(take, r)
		case failed[r.Entry] == nil:
			failed[r.Entry] = ErrNotFound
		}
	}
	return take, nil
}

// lockEntry locks a parked DLQ entry and returns its job id, or
// ErrRecordEntry. An entry re-driven already is ErrRedriven, whatever the
// action: its job, not the entry, is what to act on now. A second
// re-drive would run the job again; a discard would delete the entry that
// answers for the job it made (an old id answers until that job is
// pruned), and, were that job dead again, move its lane past it in the
// name of an entry that no longer parks it (its new entry does).
func lockEntry(ctx context.Context, tx pgx.Tx, entryID int64) (int64, error) {
	var jobID, redriveJob *int64
	err := tx.QueryRow(ctx, `SELECT job_id, redrive_job_id FROM dlq_entries WHERE id = $1 FOR UPDATE`,
		entryID).Scan(&jobID, &redriveJob)
	if err != nil {
		return 0, notFound(err)
	}
	if redriveJob != nil {
		return 0, redrivenError{entryID, *redriveJob}
	}
	if jobID == nil {
		return 0, ErrRecordEntry
	}
	return *jobID, nil
}

// JobRerun puts the finished jobs of the given dedupe keys of a route
// back to run again with fresh attempts (`switchyard replay --rerun`): an
// unordered job, and a lane's blocked dead head, become queued; any other
// job of a lane rejoins its lane's (version, offset) order as waiting.
// Their DLQ entries are marked re-driven (by "replay --rerun"). Jobs not finished are left alone. It returns how
// many jobs were put back.
func (s *Store) JobRerun(ctx context.Context, route string, dedupeKeys []string) (int64, error) {
	var n int64
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		// A job kept in job_history comes back to jobs first, where the
		// next statement sees it.
		if _, err := tx.Exec(ctx, `SELECT job_history_restore(ARRAY(SELECT job_id FROM job_keys
			WHERE route = $1 AND origin = 'kafka' AND dedupe_key = ANY($2::text[])))`, route, dedupeKeys); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `
			WITH r AS (
				UPDATE jobs j SET `+putBackSQL+`
				WHERE j.id IN (SELECT job_id FROM job_keys
					WHERE route = $1 AND origin = 'kafka' AND dedupe_key = ANY($2::text[]))
				  AND j.state IN ('succeeded', 'dead', 'cancelled', 'skipped', 'expired', 'coalesced')
				RETURNING j.id, j.queue, j.state, j.key
			), d AS (
				UPDATE dlq_entries SET redriven_at = now(), redriven_by = 'replay --rerun', redrive_job_id = job_id
				WHERE job_id IN (SELECT id FROM r) AND redriven_at IS NULL
			)
			SELECT queue, state, key FROM r`, route, dedupeKeys)
		if err != nil {
			return err
		}
		queues, lanes := map[string]bool{}, map[string]bool{}
		var queue, key string
		var state jobstate.State
		_, err = pgx.ForEachRow(rows, []any{&queue, &state, &key}, func() error {
			n++
			queues[queue] = true
			if state == jobstate.Waiting {
				lanes[key] = true
			}
			return nil
		})
		if err != nil {
			return err
		}
		// Promotion sees the rows put back, so it is a statement of its own.
		if len(lanes) > 0 {
			if _, err := tx.Exec(ctx, `SELECT lane_promote($1, k) FROM unnest($2::text[]) k ORDER BY k`,
				route, slices.Sorted(maps.Keys(lanes))); err != nil {
				return err
			}
		}
		if len(queues) > 0 {
			_, err = tx.Exec(ctx, notifySQL, s.Channel(), slices.Collect(maps.Keys(queues)))
		}
		return err
	})
	return n, err
}
