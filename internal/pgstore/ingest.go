package pgstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// NewJob is one job row to insert from a record.
type NewJob struct {
	Route       string
	Kind        string
	Queue       string
	Key         string
	Version     *int64
	DedupeKey   string
	Payload     []byte
	HeaderKeys  []string
	HeaderVals  [][]byte
	MaxAttempts int
	Deadline    *time.Time
	Topic       string
	Partition   int32
	Offset      int64
	// Lane is set for jobs of ordered routes: they wait in their key's
	// lane instead of being runnable at once.
	Lane *LanePolicy
}

// LanePolicy is an ordered route's lane settings, stored on the lane row.
type LanePolicy struct {
	Policy     string // none | newer | strict
	OnDead     string // continue | block
	GapTimeout time.Duration
	GapPolicy  string // proceed | park
}

// Poison is a record that could not become a job (I6).
type Poison struct {
	Reason     string // decode | missing_field | too_large
	Route      string
	Queue      string
	Error      string
	Payload    []byte
	HeaderKeys []string
	HeaderVals [][]byte
	Topic      string
	Partition  int32
	Offset     int64
}

// OffsetAdvance moves one partition's stored position. Expected is the
// position we believe is stored (-1: no row yet); Next is one past the
// last record of the batch.
type OffsetAdvance struct {
	Topic     string
	Partition int32
	Expected  int64
	Next      int64
}

// IngestBatch is everything one poll produced.
type IngestBatch struct {
	Group   string
	Jobs    []NewJob
	Poison  []Poison
	Offsets []OffsetAdvance
}

// IngestResult counts what the batch did.
type IngestResult struct {
	Inserted   int64 // new job rows
	Duplicates int64 // rows skipped by the dedupe index (I2)
	// InsertedByTopic splits Inserted by source topic, for metrics.
	InsertedByTopic map[string]int64
	Parked          int64 // DLQ entries for poison records
	// Queues that received runnable jobs, for wake-ups.
	Queues []string
}

const stageDDL = `CREATE TEMP TABLE IF NOT EXISTS ingest_stage (
	route text, kind text, queue text, key text, version bigint, dedupe_key text,
	payload bytea, header_keys text[], header_values bytea[], max_attempts integer,
	deadline timestamptz, src_topic text, src_partition integer, src_offset bigint, lane boolean
) ON COMMIT DELETE ROWS`

// IngestCommit writes a poll's job rows, poison entries and stored offsets
// in ONE transaction (I1). Jobs go through COPY into a per-connection temp
// table and one INSERT … ON CONFLICT DO NOTHING, the fastest dedupe path
// measured (see DESIGN-NOTES). The offset of each partition advances only
// if it still holds the value this consumer last saw; otherwise another
// member processed the range, everything rolls back and ErrOffsetFenced is
// returned. Idle pools are woken with NOTIFY, delivered at commit.
func (s *Store) IngestCommit(ctx context.Context, b IngestBatch) (IngestResult, error) {
	var res IngestResult
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		res = IngestResult{}
		// Offsets first: a fenced zombie fails before writing anything.
		if err := advanceOffsets(ctx, tx, b.Group, b.Offsets); err != nil {
			return err
		}
		if len(b.Jobs) > 0 {
			if err := insertJobs(ctx, tx, b.Jobs, &res); err != nil {
				return err
			}
		}
		if len(b.Poison) > 0 {
			n, err := insertPoison(ctx, tx, b.Poison)
			if err != nil {
				return err
			}
			res.Parked = n
		}
		if len(res.Queues) > 0 {
			if _, err := tx.Exec(ctx, `SELECT pg_notify($1, q) FROM unnest($2::text[]) q`, s.Channel(), res.Queues); err != nil {
				return err
			}
		}
		return nil
	})
	return res, err
}

// Channel is the LISTEN/NOTIFY channel that announces new runnable jobs;
// the payload is the queue name. It is per schema so that two deployments
// sharing a database do not wake each other.
func (s *Store) Channel() string { return s.schema + "_jobs" }

// insertJobs inserts a batch of job rows, skipping dedupe-key conflicts
// (I2). Conflicts are rare outside redelivery and replay, so it first
// COPYs straight into jobs under a savepoint — as fast as a plain COPY —
// and only when the unique index objects does it roll back to the
// savepoint and take the staged path: COPY into a temp table, then one
// INSERT … ON CONFLICT DO NOTHING.
func insertJobs(ctx context.Context, tx pgx.Tx, jobs []NewJob, res *IngestResult) error {
	if _, err := tx.Exec(ctx, `SAVEPOINT ingest_copy`); err != nil {
		return err
	}
	n, err := tx.CopyFrom(ctx, pgx.Identifier{"jobs"}, copyColumns, jobRows(jobs, true))
	switch {
	case err == nil:
		if _, err := tx.Exec(ctx, `RELEASE SAVEPOINT ingest_copy`); err != nil {
			return err
		}
		res.Inserted = n
		res.InsertedByTopic = map[string]int64{}
		seen := map[string]bool{}
		for _, j := range jobs {
			res.InsertedByTopic[j.Topic]++
			if !seen[j.Queue] {
				seen[j.Queue] = true
				res.Queues = append(res.Queues, j.Queue)
			}
		}
	case isUniqueViolation(err):
		if _, err := tx.Exec(ctx, `ROLLBACK TO SAVEPOINT ingest_copy`); err != nil {
			return err
		}
		if err := insertStaged(ctx, tx, jobs, res); err != nil {
			return err
		}
	default:
		return fmt.Errorf("copy jobs: %w", err)
	}
	return promoteLanes(ctx, tx, jobs)
}

func isUniqueViolation(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "23505"
}

var copyColumns = []string{"route", "kind", "queue", "key", "version", "dedupe_key",
	"payload", "header_keys", "header_values", "max_attempts", "deadline",
	"src_topic", "src_partition", "src_offset", "lane", "state"}

// jobRows yields COPY rows for jobs (withState: for the jobs table itself,
// which needs the initial state; the staging table derives it).
func jobRows(jobs []NewJob, withState bool) pgx.CopyFromSource {
	return pgx.CopyFromSlice(len(jobs), func(i int) ([]any, error) {
		j := &jobs[i]
		// nil slices would COPY as NULL into NOT NULL columns.
		payload := j.Payload
		if payload == nil {
			payload = []byte{}
		}
		row := []any{j.Route, j.Kind, j.Queue, j.Key, j.Version, j.DedupeKey,
			payload, nonNil(j.HeaderKeys), nonNilBytes(j.HeaderVals), j.MaxAttempts, j.Deadline,
			j.Topic, j.Partition, j.Offset, j.Lane != nil}
		if withState {
			state := "queued"
			if j.Lane != nil {
				state = "waiting"
			}
			row = append(row, state)
		}
		return row, nil
	})
}

func insertStaged(ctx context.Context, tx pgx.Tx, jobs []NewJob, res *IngestResult) error {
	if _, err := tx.Exec(ctx, stageDDL); err != nil {
		return err
	}
	staged, err := tx.CopyFrom(ctx, pgx.Identifier{"ingest_stage"}, copyColumns[:len(copyColumns)-1], jobRows(jobs, false))
	if err != nil {
		return fmt.Errorf("copy jobs: %w", err)
	}
	rows, err := tx.Query(ctx, `
		WITH ins AS (
			INSERT INTO jobs (route, kind, queue, state, key, version, dedupe_key, payload,
				header_keys, header_values, max_attempts, deadline, src_topic, src_partition, src_offset, lane)
			SELECT route, kind, queue, CASE WHEN lane THEN 'waiting' ELSE 'queued' END, key, version,
				dedupe_key, payload, header_keys, header_values, max_attempts, deadline,
				src_topic, src_partition, src_offset, lane
			-- No ORDER BY: rows are staged in offset order per partition
			-- already, and sorting wide rows cost ~30% of ingest.
			FROM ingest_stage
			ON CONFLICT (route, dedupe_key) DO NOTHING
			RETURNING queue, src_topic
		)
		SELECT queue, src_topic, count(*) FROM ins GROUP BY queue, src_topic`)
	if err != nil {
		return err
	}
	var queue, topic string
	var n int64
	res.InsertedByTopic = map[string]int64{}
	seen := map[string]bool{}
	_, err = pgx.ForEachRow(rows, []any{&queue, &topic, &n}, func() error {
		res.Inserted += n
		res.InsertedByTopic[topic] += n
		if !seen[queue] {
			seen[queue] = true
			res.Queues = append(res.Queues, queue)
		}
		return nil
	})
	if err != nil {
		return err
	}
	res.Duplicates = staged - res.Inserted
	return nil
}

// promoteLanes creates the lanes of the batch's ordered jobs and promotes
// a head in every idle one. Lane rows are locked in (route, key) order, so
// two batches touching the same lanes cannot deadlock; ON CONFLICT DO
// UPDATE locks the row even when its WHERE leaves it unchanged, and writes
// only when the route's lane settings changed.
func promoteLanes(ctx context.Context, tx pgx.Tx, jobs []NewJob) error {
	type laneKey struct{ route, key string }
	seen := map[laneKey]bool{}
	var route, key, policy, onDead, gapPolicy []string
	var gapMS []int64
	for _, j := range jobs {
		k := laneKey{j.Route, j.Key}
		if j.Lane == nil || seen[k] {
			continue
		}
		seen[k] = true
		route, key = append(route, j.Route), append(key, j.Key)
		policy, onDead = append(policy, j.Lane.Policy), append(onDead, j.Lane.OnDead)
		gapMS, gapPolicy = append(gapMS, j.Lane.GapTimeout.Milliseconds()), append(gapPolicy, j.Lane.GapPolicy)
	}
	if len(route) == 0 {
		return nil
	}
	_, err := tx.Exec(ctx, `
		INSERT INTO lanes AS l (route, key, policy, on_dead, gap_timeout, gap_policy)
		SELECT route, key, policy, on_dead, gap_ms * interval '1 millisecond', gap_policy
		FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::bigint[], $6::text[])
			AS u(route, key, policy, on_dead, gap_ms, gap_policy)
		ORDER BY route, key
		ON CONFLICT (route, key) DO UPDATE SET policy = excluded.policy, on_dead = excluded.on_dead,
			gap_timeout = excluded.gap_timeout, gap_policy = excluded.gap_policy
		WHERE (l.policy, l.on_dead, l.gap_timeout, l.gap_policy)
			IS DISTINCT FROM (excluded.policy, excluded.on_dead, excluded.gap_timeout, excluded.gap_policy)`,
		route, key, policy, onDead, gapMS, gapPolicy)
	if err != nil {
		return fmt.Errorf("lanes: %w", err)
	}
	_, err = tx.Exec(ctx, `
		SELECT lane_promote(l.route, l.key)
		FROM lanes l JOIN unnest($1::text[], $2::text[]) AS u(route, key) USING (route, key)
		WHERE l.head_job_id IS NULL AND NOT l.blocked
		ORDER BY l.route, l.key`, route, key)
	if err != nil {
		return fmt.Errorf("promote lanes: %w", err)
	}
	return nil
}

func insertPoison(ctx context.Context, tx pgx.Tx, ps []Poison) (int64, error) {
	batch := &pgx.Batch{}
	for _, p := range ps {
		batch.Queue(`
			INSERT INTO dlq_entries (reason, route, queue, src_topic, src_partition, src_offset,
				last_error, errors, payload, header_keys, header_values)
			VALUES ($1, $2, $3, $4, $5, $6, $7,
				jsonb_build_array(jsonb_build_object('error', $7::text, 'at', now())), $8, $9, $10)
			ON CONFLICT DO NOTHING`,
			p.Reason, p.Route, p.Queue, p.Topic, p.Partition, p.Offset, p.Error, p.Payload,
			nonNil(p.HeaderKeys), nonNilBytes(p.HeaderVals))
	}
	br := tx.SendBatch(ctx, batch)
	var n int64
	for range ps {
		tag, err := br.Exec()
		if err != nil {
			br.Close()
			return 0, err
		}
		n += tag.RowsAffected()
	}
	return n, br.Close()
}

// advanceOffsets is the fence of I1: each partition's stored position
// moves from exactly the value this consumer expects, or nothing commits.
func advanceOffsets(ctx context.Context, tx pgx.Tx, group string, advs []OffsetAdvance) error {
	var uTopic, iTopic []string
	var uPart, iPart []int32
	var uExp, uNext, iNext []int64
	for _, a := range advs {
		if a.Expected < 0 {
			iTopic, iPart, iNext = append(iTopic, a.Topic), append(iPart, a.Partition), append(iNext, a.Next)
			continue
		}
		uTopic, uPart = append(uTopic, a.Topic), append(uPart, a.Partition)
		uExp, uNext = append(uExp, a.Expected), append(uNext, a.Next)
	}
	if len(uTopic) > 0 {
		tag, err := tx.Exec(ctx, `
			UPDATE kafka_offsets o SET next_offset = u.next, updated_at = now()
			FROM unnest($2::text[], $3::int[], $4::bigint[], $5::bigint[]) AS u(topic, part, expected, next)
			WHERE o.group_id = $1 AND o.topic = u.topic AND o.partition = u.part
			  AND o.next_offset = u.expected`,
			group, uTopic, uPart, uExp, uNext)
		if err != nil {
			return err
		}
		if tag.RowsAffected() != int64(len(uTopic)) {
			return ErrOffsetFenced
		}
	}
	if len(iTopic) > 0 {
		tag, err := tx.Exec(ctx, `
			INSERT INTO kafka_offsets (group_id, topic, partition, next_offset)
			SELECT $1, t, p, n FROM unnest($2::text[], $3::int[], $4::bigint[]) AS u(t, p, n)
			ON CONFLICT DO NOTHING`,
			group, iTopic, iPart, iNext)
		if err != nil {
			return err
		}
		if tag.RowsAffected() != int64(len(iTopic)) {
			return ErrOffsetFenced
		}
	}
	return nil
}

// OffsetLoad returns the stored next offsets of a group, by topic and
// partition.
func (s *Store) OffsetLoad(ctx context.Context, group string, topics []string) (map[string]map[int32]int64, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT topic, partition, next_offset FROM kafka_offsets
		WHERE group_id = $1 AND topic = ANY($2)`, group, topics)
	if err != nil {
		return nil, err
	}
	out := map[string]map[int32]int64{}
	var t string
	var p int32
	var n int64
	_, err = pgx.ForEachRow(rows, []any{&t, &p, &n}, func() error {
		if out[t] == nil {
			out[t] = map[int32]int64{}
		}
		out[t][p] = n
		return nil
	})
	return out, err
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func nonNilBytes(s [][]byte) [][]byte {
	if s == nil {
		return [][]byte{}
	}
	return s
}
