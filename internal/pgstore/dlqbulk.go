package pgstore

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/switchyard-dev/switchyard/internal/bulk"
	"github.com/switchyard-dev/switchyard/jobstate"
)

// A bulk re-drive's or discard's chunk of entries (package bulk): the
// entries whose action stays within the entry and a job that heads no
// lane, in one statement (a re-drive then promotes the lanes of the jobs
// it put back waiting); the others are left to be taken alone, each in a
// transaction of its own. DLQRedrive and DLQDiscard are the same
// statement for one entry, which then takes a lane's job's entry too.
// Entries are locked in id order, then their jobs in id order. The
// statements run after planSQL (chunkStatement): a table not yet
// analyzed planned a sequential scan of every entry.
//
// Left alone: a record (its re-drive decodes it again, in Go), and a
// lane's dead head, whose re-drive or discard moves its lane (for the
// reason jobsCancel gives; headAloneSQL).

// DLQRedriveMany re-drives the entries among ids whose job is dead and
// does not head a lane, and returns those it could not re-drive, each with
// DLQRedrive's error, and the entries it left alone.
func (s *Store) DLQRedriveMany(ctx context.Context, ids []int64, by string) (failed []bulk.Failure, alone []int64, err error) {
	return s.dlqMany(ctx, true, ids, by)
}

// DLQDiscardMany discards the entries among ids that are records or whose
// job does not head a lane, and returns those it could not discard, each with
// DLQDiscard's error, and the entries it left alone.
func (s *Store) DLQDiscardMany(ctx context.Context, ids []int64, by string) (failed []bulk.Failure, alone []int64, err error) {
	return s.dlqMany(ctx, false, ids, by)
}

// dlqMany is dlqChunk in a transaction of its own.
func (s *Store) dlqMany(ctx context.Context, redrive bool, ids []int64, by string) (failed []bulk.Failure, alone []int64, err error) {
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var errs map[int64]error
		errs, alone, err = dlqChunk(ctx, tx, redrive, ids, by)
		failed = bulk.FailuresOf(errs)
		return err
	})
	if err != nil {
		return nil, nil, err
	}
	return failed, alone, nil
}

// dlqChunk runs a chunk's statement in tx (a re-drive's, or a
// discard's), whose row for each entry found is its id, job, the job it
// was re-driven to, whether it is left alone for its job's lane (NULL:
// the job is gone), and, for a re-drive, the job's state under its lock
// and whether the re-drive put it back waiting in its lane; and it sorts
// out what the statement did not do, and promotes the lanes of jobs put
// back waiting. Of one entry, it takes a lane's job's entry too
// (DLQRedrive, and DLQDiscard once the lane has moved on).
func dlqChunk(ctx context.Context, tx pgx.Tx, redrive bool, ids []int64, by string) (failed map[int64]error, alone []int64, err error) {
	sql := dlqDiscardManySQL
	if redrive {
		sql = dlqRedriveManySQL
	}
	failed = map[int64]error{}
	var id int64
	var job, redriven *int64
	var lane *bool
	var state *jobstate.State
	var waiting bool
	var promote []int64
	missing, err := chunkStatement(ctx, tx, sql, ids, by, []any{&id, &job, &redriven, &lane, &state, &waiting}, func() {
		switch {
		case redriven != nil:
			failed[id] = redrivenError{id, *redriven}
		case lane != nil && *lane, redrive && job == nil:
			alone = append(alone, id)
		case !redrive: // discarded
		case lane == nil:
			failed[id] = ErrNotFound // its job is gone
		case state == nil || *state != jobstate.Dead:
			failed[id] = ErrConflict
		case waiting:
			promote = append(promote, *job)
		}
	})
	if err != nil {
		return nil, nil, err
	}
	for _, id := range missing {
		failed[id] = ErrNotFound
	}
	if len(promote) > 0 {
		// Promotion sees the rows put back, so it is a statement of its
		// own; lanes in (route, key) order, as every path locks them.
		if _, err := tx.Exec(ctx, `SELECT lane_promote(route, key) FROM (SELECT DISTINCT route, key FROM jobs
			WHERE id = ANY($1::bigint[])) l ORDER BY route, key`, promote); err != nil {
			return nil, nil, err
		}
	}
	return failed, alone, nil
}

// headAloneSQL is whether a chunk of entries $1 leaves the entry of the
// job row jobs to be taken alone: the job heads its lane (a dead head
// that blocks it), and the entry is one of several. A dead job that does
// not head its lane (its lane moved on) is re-driven to waiting, behind
// the lane's head, or its entry discarded, without moving the lane: the
// chunk then locks the lanes of the jobs it put back only once it holds
// every one, in (route, key) order, to promote them, as every path locks
// lanes. No transaction that holds a lane waits for a dead job: promotion
// and version skips take only jobs that were waiting.
const headAloneSQL = `(lane AND cardinality($1::bigint[]) > 1 AND EXISTS (SELECT 1 FROM lanes l
		WHERE l.route = jobs.route AND l.key = jobs.key AND l.head_job_id = jobs.id))`

// dlqRedriveManySQL is DLQRedrive's statement for entries $1, for $2.
var dlqRedriveManySQL = `
	WITH e AS (
		SELECT id, job_id, redrive_job_id FROM dlq_entries WHERE id = ANY($1::bigint[]) ORDER BY id FOR UPDATE
	), locked AS (
		-- The entries' jobs as an array, looked up by primary key: as a
		-- subquery joined in id order, the plan walked all of jobs.
		SELECT id, state FROM jobs
		WHERE id = ANY(ARRAY(SELECT job_id FROM e WHERE redrive_job_id IS NULL)) AND NOT ` + headAloneSQL + `
		ORDER BY id FOR UPDATE
	), upd AS (
		UPDATE jobs j SET ` + putBackSQL + `
		FROM locked l WHERE j.id = l.id AND l.state = 'dead'
		RETURNING j.id, j.state
	), ` + redrivenSQL(`SELECT e.id, upd.id FROM e JOIN upd ON upd.id = e.job_id`) + `
	SELECT e.id, e.job_id, e.redrive_job_id, (SELECT ` + headAloneSQL + ` FROM jobs WHERE id = e.job_id),
		locked.state, coalesce(upd.state = 'waiting', false)
	FROM e LEFT JOIN locked ON locked.id = e.job_id LEFT JOIN upd ON upd.id = e.job_id`

// redrivenSQL is the common table expressions that mark entries
// re-driven to jobs, by $2, and audit each: the entries and their jobs
// are the rows (entry, job) of pairs, a query.
func redrivenSQL(pairs string) string {
	return `marked AS (
		UPDATE dlq_entries d SET redriven_at = now(), redriven_by = $2, redrive_job_id = p.job
		FROM (` + pairs + `) AS p(entry, job)
		WHERE d.id = p.entry
		RETURNING d.id, d.redrive_job_id
	), logged AS (
		` + auditRowsSQL(AuditRedrive, `'dlq/' || id`, `jsonb_build_object('job_id', redrive_job_id)`, "marked") + `
	)`
}

// dlqDiscardManySQL is DLQDiscard's statement for entries $1, for $2:
// the entry goes, and its audit entry says what was dropped.
var dlqDiscardManySQL = `
	WITH e AS (
		-- lane: the entry's job heads its lane and the entry is not
		-- alone (NULL: its job is gone).
		SELECT id, job_id, redrive_job_id,
			(SELECT ` + headAloneSQL + ` FROM jobs WHERE id = d.job_id) AS lane
		FROM dlq_entries d WHERE id = ANY($1::bigint[]) ORDER BY id FOR UPDATE
	), del AS (
		DELETE FROM dlq_entries d USING e
		WHERE d.id = e.id AND e.redrive_job_id IS NULL AND NOT coalesce(e.lane, false)
		RETURNING d.id, d.reason, d.route, d.queue, d.job_id, d.src_topic, d.src_partition, d.src_offset
	), logged AS (
		` + auditRowsSQL(AuditDiscard, `'dlq/' || id`, `jsonb_build_object('reason', reason, 'route', route, 'queue', queue, 'job_id', job_id)
			|| CASE WHEN src_topic IS NOT NULL AND src_partition IS NOT NULL AND src_offset IS NOT NULL
				THEN jsonb_build_object('source', src_topic || '/' || src_partition || '/' || src_offset)
				ELSE '{}' END`, "del") + `
	)
	SELECT id, job_id, redrive_job_id, lane, NULL::text, false FROM e`
