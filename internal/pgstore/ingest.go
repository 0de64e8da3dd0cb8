package pgstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/switchyard-dev/switchyard/jobstate"
)

// Origins of jobs. Each is a dedupe namespace of its own (I2): the
// dedupe index is (route, origin, dedupe key), so a value of one origin
// can never match a job of another.
const (
	OriginKafka    = "kafka"
	OriginAPI      = "api"
	OriginSchedule = "schedule"
)

// MaxKeyBytes bounds a job's key and its dedupe key. Both are btree
// index entries (the lanes' primary key, the dedupe and key indexes), and
// Postgres refuses an entry over about 2.7 kB with an error that fails
// the whole statement, and with it every record of a batch. Ingest parks
// a record whose key or dedupe value is longer (too_large); the API
// answers 400. 1 KiB leaves room for the route name beside the key.
const MaxKeyBytes = 1024

// NewJob is one job row to insert from a record.
type NewJob struct {
	// Origin is where the job came from: OriginKafka (the zero value),
	// OriginAPI or OriginSchedule.
	Origin      string
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
	// RecordKey is the Kafka record's key, kept only in case the job is
	// refused and parked (see Poison.RecordKey); it is not a job column.
	RecordKey []byte
	// Coalesce: once stored, the job replaces the unstarted jobs of its
	// route and key (coalesceJobs).
	Coalesce bool
	// Group is the job's group value in a flow-limited route (GroupAll
	// for one without a group); empty for every other job.
	Group string
	// RunAt is when the job may run first (a route's run_at or delay, the
	// API's Switchyard-Run-At or Switchyard-Delay, a schedule's slot); nil:
	// now, the inserting transaction's time.
	RunAt *time.Time
	// RecordAt is the Kafka record's timestamp (jobs.record_at); nil for a
	// job that did not come from a record.
	RecordAt *time.Time
}

// GroupAll is the one group of a flow-limited route that is not grouped:
// its max_running and rate_limit then count all of its jobs together.
const GroupAll = "*"

// group is the grp column's value: NULL outside flow-limited routes.
func (j *NewJob) group() *string {
	if j.Group == "" {
		return nil
	}
	return &j.Group
}

// recordRoute identifies a job within an ingest batch: one per record and
// route.
type recordRoute struct {
	topic, route string
	partition    int32
	offset       int64
}

func (j *NewJob) recordRoute() recordRoute {
	return recordRoute{j.Topic, j.Route, j.Partition, j.Offset}
}

func (j *NewJob) origin() string {
	if j.Origin == "" {
		return OriginKafka
	}
	return j.Origin
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
	// RecordKey is the record's key (nil when it had none), so that a
	// re-drive decodes the record as it was read.
	RecordKey []byte
	// Truncated says Payload, the headers and RecordKey hold only part of
	// the record, which was RecordBytes long: a re-drive reads it again
	// from Kafka.
	Truncated   bool
	RecordBytes int
	Topic       string
	Partition   int32
	Offset      int64
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
	// Claims are claims for the storing process's idle workers, run in
	// the batch's transaction when it commits in one round trip (see
	// IngestClaim).
	Claims []*IngestClaim
	// Continues marks the second half of an IngestSplit, stored beside
	// the first: its offsets move last in its transaction instead of
	// first, after it locks their rows, which waits for the first half's
	// transaction where the two share a partition. Its fence then sees
	// where the first half left that partition, so it commits only after
	// the first half did.
	Continues bool
}

// CarriesClaims says whether the batch's Claims would run: it commits in
// one round trip (at most smallBatch jobs, no poison record).
func (b IngestBatch) CarriesClaims() bool {
	return len(b.Jobs) > 0 && len(b.Jobs) <= smallBatch && len(b.Poison) == 0
}

// Queues are the queues of the batch's jobs, each once.
func (b IngestBatch) Queues() []string { return queuesOf(b.Jobs) }

// queuesOf lists the queues of jobs, each once, in their order.
func queuesOf(jobs []NewJob) []string {
	var out []string
	for _, j := range jobs {
		if !slices.Contains(out, j.Queue) {
			out = append(out, j.Queue)
		}
	}
	return out
}

// IngestClaim is a claim that IngestCommit runs after a batch's jobs, in
// its transaction, so that a process that stores a record and has a
// worker free runs the job without a claim of its own: a transaction
// and a wake-up less for every record at low load. It claims at most
// Limit runnable jobs of Queue (the batch's or older ones, in claim
// order) of routes not in Limited, as JobClaim does, leased for
// min(Lease, MaxRuntime). It runs only where the batch is one round trip
// (a direct batch of at most smallBatch jobs and no poison record): Ran
// says whether it did, and Claimed holds its jobs, committed with the
// batch. A queue whose claim ran is notified only if runnable jobs are
// left in it: no other process need wake for jobs already taken.
type IngestClaim struct {
	Queue             string
	Limit             int
	Lease, MaxRuntime time.Duration
	Limited           []string
	Ran               bool
	Claimed           []*Claimed
}

// IngestResult counts what the batch did.
type IngestResult struct {
	Inserted   int64 // new job rows
	Duplicates int64 // rows skipped by the dedupe index (I2)
	// InsertedByRoute splits Inserted by route, for metrics and
	// backpressure.
	InsertedByRoute map[string]int64
	Parked          int64 // DLQ entries for poison records
	// RefusedByRoute counts, by route, the jobs that Postgres
	// refused for their data and that were parked instead (see
	// insertJobs): poison that only the database could see.
	RefusedByRoute map[string]int64
	// Queues that received runnable jobs, for wake-ups.
	Queues []string
	// CoalescedByKind counts, by kind, the jobs that this batch's jobs
	// replaced (coalesce: latest).
	CoalescedByKind map[string]int64
}

// add merges the counts of another statement of the same batch.
func (r *IngestResult) add(o IngestResult) {
	r.Inserted += o.Inserted
	r.Duplicates += o.Duplicates
	for route, n := range o.InsertedByRoute {
		if r.InsertedByRoute == nil {
			r.InsertedByRoute = map[string]int64{}
		}
		r.InsertedByRoute[route] += n
	}
	for _, q := range o.Queues {
		if !slices.Contains(r.Queues, q) {
			r.Queues = append(r.Queues, q)
		}
	}
}

// stageDDL is the staging table of the conflict path; each staged row
// draws its job id as it is copied in.
const stageDDL = `CREATE TEMP TABLE IF NOT EXISTS ingest_stage (
	id bigint DEFAULT nextval('jobs_id_seq'), origin text, route text, kind text, queue text, key text, version bigint, dedupe_key text,
	payload bytea, header_keys text[], header_values bytea[], max_attempts integer,
	deadline timestamptz, src_topic text, src_partition integer, src_offset bigint, lane boolean, grp text,
	scheduled_at timestamptz, record_at timestamptz
) ON COMMIT DELETE ROWS`

// IngestCommit writes a poll's job rows, poison entries and stored offsets
// in ONE transaction (I1). The offset of each partition advances only if
// it still holds the value this consumer last saw; otherwise another
// member processed the range, everything rolls back and ErrOffsetFenced
// is returned. Idle pools are woken with NOTIFY, delivered at commit.
//
// Jobs are first written directly: a batch of up to smallBatch jobs in
// the same round trip that moves the offsets (one statement from arrays,
// its dedupe conflicts skipped with ON CONFLICT DO NOTHING), a larger one
// by COPY straight into job_keys and jobs, its ids drawn in that round
// trip. A record that arrives while a transaction commits waits for it:
// a small batch commits in 1 round trip (3 if it has poison records), a
// large one in 5 (6 with lane or coalescing records). Only when a
// large batch meets a dedupe conflict, or any batch a job that Postgres
// refuses for its data, is it written again carefully, in a transaction
// of its own: under a savepoint, conflicts skipped through a staging
// table (the fastest dedupe path measured for large batches, see
// DESIGN-NOTES), refused jobs parked in their records' place while the
// rest commit (I6, see insertJobs), in 9 round trips. After a batch that
// needed care, the next ones take the careful path at once, as a
// redelivery or a replay brings conflicts in runs, until one finds none.
func (s *Store) IngestCommit(ctx context.Context, b IngestBatch) (IngestResult, error) {
	if !s.ingestCareful.Load() {
		res, err := s.ingest(ctx, b, true)
		if !errors.Is(err, errNeedsCare) {
			return res, err
		}
		s.ingestCareful.Store(true)
	}
	res, err := s.ingest(ctx, b, false)
	if err == nil && res.Duplicates == 0 && len(res.RefusedByRoute) == 0 {
		s.ingestCareful.Store(false)
	}
	return res, err
}

// errNeedsCare rolls back a direct ingest whose jobs need the careful
// path: a dedupe conflict, or data that Postgres refused.
var errNeedsCare = errors.New("ingest: the batch needs the careful path")

// ingest is one transaction of IngestCommit, direct or careful.
func (s *Store) ingest(ctx context.Context, b IngestBatch, direct bool) (IngestResult, error) {
	var res IngestResult
	// Offsets first: a fenced zombie fails before writing anything. (A
	// second half moves them last, at the end of ingestRest: Continues.)
	first := &pgx.Batch{}
	if !b.Continues {
		queueOffsets(first, b.Group, b.Offsets)
	}
	var ids []int64
	var now time.Time
	small := direct && len(b.Jobs) <= smallBatch && !b.Continues
	if direct && len(b.Jobs) > 0 {
		all := insertedAll(b.Jobs)
		if small {
			queueInsertArrays(first, b.Jobs, &res)
		} else {
			queueJobIDs(first, len(b.Jobs), &ids, &now)
			res.add(all)
		}
		if small {
			queueLanesAndCoalesce(first, b.Jobs, b.Jobs, true, &res)
		}
		// Every job's queue, known before the insert: at most a
		// spurious wake-up for a queue whose jobs were duplicates.
		if small && b.CarriesClaims() && len(b.Claims) > 0 {
			claimed := queueIngestClaims(first, b.Claims)
			first.Queue(notifyLeftSQL, s.Channel(), all.Queues, claimed)
		} else {
			first.Queue(notifySQL, s.Channel(), all.Queues)
		}
	}
	var err error
	switch {
	case first.Len() == 0 && len(b.Jobs) == 0 && len(b.Poison) == 0 && !b.Continues:
		return res, nil
	case small && len(b.Poison) == 0:
		// The first batch is the whole transaction: sent alone it is one
		// implicit transaction (every statement, the offsets' fence
		// included, fails in the database, which rolls all back), in one
		// round trip instead of three.
		err = s.pool.SendBatch(ctx, first).Close()
		if err != nil {
			for _, c := range b.Claims {
				c.Ran, c.Claimed = false, nil // rolled back
			}
		}
	default:
		err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			if first.Len() > 0 {
				if err := tx.SendBatch(ctx, first).Close(); err != nil {
					return err
				}
			}
			// ids and now are the first batch's, read only now.
			return s.ingestRest(ctx, tx, b, direct, small, ids, now, &res)
		})
	}
	if isOffsetsMoved(err) {
		return IngestResult{}, ErrOffsetFenced
	}
	if _, refused := refusedData(err); direct && (refused || isUniqueViolation(err)) {
		// Whichever statement met it, the job's own or its lane's: the
		// careful path bisects the batch down to the jobs at fault.
		return res, errNeedsCare
	}
	return res, err
}

// queueLanesAndCoalesce queues, after the jobs' insert, the lane rows of
// the inserted jobs (where the insert did not make them: created) and the
// promotion and coalescing that the stored ones bring.
func queueLanesAndCoalesce(b *pgx.Batch, inserted, stored []NewJob, create bool, res *IngestResult) {
	if create {
		queueUpsertLanes(b, inserted)
	}
	queuePromoteLanes(b, stored)
	queueCoalesce(b, stored, &res.CoalescedByKind)
}

// ingestRest is the rest of an ingest's transaction after its first
// batch, which drew ids and now for a large direct batch and holds all of
// a small one's statements but its poison.
func (s *Store) ingestRest(ctx context.Context, tx pgx.Tx, b IngestBatch, direct, small bool,
	ids []int64, now time.Time, res *IngestResult) error {
	poison := b.Poison
	if len(b.Jobs) > 0 && !small {
		stored := b.Jobs
		if direct {
			if err := copyJobs(ctx, tx, b.Jobs, ids, now); err != nil {
				return err
			}
		} else {
			refused, err := insertJobs(ctx, tx, b.Jobs, res)
			if err != nil {
				return err
			}
			if len(refused) > 0 {
				res.RefusedByRoute = map[string]int64{}
				out := map[recordRoute]bool{}
				for _, r := range refused {
					res.RefusedByRoute[r.job.Route]++
					poison = append(poison, r.job.refusedPoison(r.err))
					out[r.job.recordRoute()] = true
				}
				stored = slices.DeleteFunc(slices.Clone(b.Jobs), func(j NewJob) bool { return out[j.recordRoute()] })
			}
		}
		rest := &pgx.Batch{}
		queueLanesAndCoalesce(rest, b.Jobs, stored, direct, res)
		if err := sendBatch(ctx, tx, rest); err != nil {
			return err
		}
	}
	if len(poison) > 0 {
		n, err := insertPoison(ctx, tx, poison)
		if err != nil {
			return err
		}
		res.Parked = n
	}
	if !direct && len(res.Queues) > 0 {
		if _, err := tx.Exec(ctx, notifySQL, s.Channel(), res.Queues); err != nil {
			return err
		}
	}
	if b.Continues {
		last := &pgx.Batch{}
		queueLockOffsets(last, b.Group, b.Offsets)
		queueOffsets(last, b.Group, b.Offsets)
		return sendBatch(ctx, tx, last)
	}
	return nil
}

// notifySQL wakes the pools of queues $2 on channel $1.
const notifySQL = `SELECT pg_notify($1, q) FROM unnest($2::text[]) q`

// notifyLeftSQL is notifySQL after the batch's claims for queues $3: a
// queue claimed for is notified only if it still has runnable jobs.
const notifyLeftSQL = `SELECT pg_notify($1, q) FROM unnest($2::text[]) q
	WHERE q <> ALL($3::text[]) OR EXISTS (SELECT FROM jobs
		WHERE queue = q AND state IN ('queued', 'retrying') AND scheduled_at <= now())`

// queueIngestClaims queues claims in b, each after claimPlanSQL (whose
// settings, local to the transaction, hold for the statements after it:
// this and the notification are the batch's last), and returns the
// queues claimed for.
func queueIngestClaims(b *pgx.Batch, claims []*IngestClaim) []string {
	queues := make([]string, 0, len(claims))
	b.Queue(claimPlanSQL)
	for _, c := range claims {
		queues = append(queues, c.Queue)
		limited := append([]string{}, c.Limited...) // never nil: route <> ALL(NULL) claims nothing
		b.Queue(claimUnlimitedSQL, c.Queue, c.Limit, c.Lease.Milliseconds(), c.MaxRuntime.Milliseconds(),
			time.Time{}, int64(0), limited).Query(func(rows pgx.Rows) error {
			jobs, _, err := collectClaimed(rows, ClaimPosition{})
			c.Ran, c.Claimed = err == nil, jobs
			return err
		})
	}
	return queues
}

// queueCoalesce ends coalesced the unstarted jobs that the stored jobs of
// coalescing routes replace: of each (route, key), every waiting, queued
// or retrying job but the newest — for an unordered route the highest id
// (ids follow record order), for a lane the last in its order (version,
// offset, id) among its waiting jobs, as promotion would reach it; a
// lane's head is never replaced, it holds the lane. A job being claimed
// right now is locked; the UPDATE waits for the claim, finds it running,
// and leaves it: a started job is never coalesced. queueCoalesce queues
// it in b; its callback sets the count by kind.
func queueCoalesce(b *pgx.Batch, jobs []NewJob, byKind *map[string]int64) {
	var routes, keys []string
	seen := map[[2]string]bool{}
	for _, j := range jobs {
		k := [2]string{j.Route, j.Key}
		if j.Coalesce && j.Key != "" && !seen[k] {
			seen[k] = true
			routes, keys = append(routes, j.Route), append(keys, j.Key)
		}
	}
	if len(routes) == 0 {
		return
	}
	b.Queue(`SELECT kind FROM jobs_coalesce($1, $2) kind`, routes, keys).Query(func(rows pgx.Rows) error {
		out := map[string]int64{}
		var kind string
		_, err := pgx.ForEachRow(rows, []any{&kind}, func() error { out[kind]++; return nil })
		*byKind = out
		return err
	})
}

// Channel is the LISTEN/NOTIFY channel that announces new runnable jobs;
// the payload is the queue name. It is per schema so that two deployments
// sharing a database do not wake each other.
func (s *Store) Channel() string { return s.schema + "_jobs" }

// insertJobs inserts a batch of job rows and their job_keys rows (see
// 0009_job_keys.sql), skipping dedupe-key conflicts (I2), and creates the
// lanes of its ordered jobs. Conflicts are rare outside redelivery and
// replay, so it first draws the batch's ids and COPYs straight into
// job_keys and jobs — as fast as a plain COPY — and only when the unique
// index of job_keys objects does it roll back and take the staged path:
// COPY into a temp table, then one statement inserting what does not
// conflict (ON CONFLICT DO NOTHING) into both.
//
// Rows that Postgres refuses for their data (a value no check in decode
// foresaw) come back as refused instead of failing the batch: the
// insert is bisected under savepoints until each refused row stands
// alone, so that no record can stop its partition (I6). Lanes are not
// promoted here, so that the order of promotion never depends on how a
// batch was split: the caller promotes once, after every row is in.
func insertJobs(ctx context.Context, tx pgx.Tx, jobs []NewJob, res *IngestResult) ([]refused[NewJob], error) {
	return bisect(ctx, tx, jobs, func(jobs []NewJob) error {
		var part IngestResult
		ids, now, err := drawJobIDs(ctx, tx, len(jobs))
		if err != nil {
			return err
		}
		err = copyJobs(ctx, tx, jobs, ids, now)
		switch {
		case err == nil:
			part = insertedAll(jobs)
		case isUniqueViolation(err):
			if _, err := tx.Exec(ctx, `ROLLBACK TO SAVEPOINT `+bisectSavepoint); err != nil {
				return err
			}
			if err := insertStaged(ctx, tx, jobs, &part); err != nil {
				return err
			}
		default:
			return err
		}
		if err := upsertLanes(ctx, tx, jobs); err != nil {
			return err
		}
		res.add(part)
		return nil
	})
}

// copyJobs COPYs jobs, with their drawn ids, into job_keys and then jobs:
// a dedupe conflict fails the first, as a unique violation.
func copyJobs(ctx context.Context, tx pgx.Tx, jobs []NewJob, ids []int64, now time.Time) error {
	if _, err := tx.CopyFrom(ctx, pgx.Identifier{"job_keys"}, keyColumns, keyRows(jobs, ids)); err != nil {
		return fmt.Errorf("copy job keys: %w", err)
	}
	if _, err := tx.CopyFrom(ctx, pgx.Identifier{"jobs"}, append([]string{"id"}, copyColumns...), jobRows(jobs, ids, now)); err != nil {
		return fmt.Errorf("copy jobs: %w", err)
	}
	return nil
}

// insertedAll is the result of storing every one of jobs.
func insertedAll(jobs []NewJob) IngestResult {
	r := IngestResult{Inserted: int64(len(jobs)), InsertedByRoute: map[string]int64{}, Queues: queuesOf(jobs)}
	for _, j := range jobs {
		r.InsertedByRoute[j.Route]++
	}
	return r
}

// bisectSavepoint is the savepoint that bisect holds around each insert;
// an insert may roll back to it to try again another way.
const bisectSavepoint = "ingest_rows"

// refused is an item Postgres would not store, with its reason.
type refused[T any] struct {
	job T
	err *pgconn.PgError
}

// bisect runs insert over items under a savepoint. When Postgres refuses
// them for their data (refusedData), it rolls back and splits them, until
// each refused item stands alone, and returns those: k bad items among n
// cost O(k log n) statements, and a good batch nothing but the savepoint.
// Any other error is returned as is: the transaction is then aborted.
func bisect[T any](ctx context.Context, tx pgx.Tx, items []T, insert func([]T) error) ([]refused[T], error) {
	if _, err := tx.Exec(ctx, `SAVEPOINT `+bisectSavepoint); err != nil {
		return nil, err
	}
	err := insert(items)
	if err == nil {
		_, err = tx.Exec(ctx, `RELEASE SAVEPOINT `+bisectSavepoint)
		return nil, err
	}
	pe, ok := refusedData(err)
	if !ok {
		return nil, err
	}
	if _, err := tx.Exec(ctx, `ROLLBACK TO SAVEPOINT `+bisectSavepoint+`; RELEASE SAVEPOINT `+bisectSavepoint); err != nil {
		return nil, err
	}
	if len(items) == 1 {
		return []refused[T]{{items[0], pe}}, nil
	}
	mid := len(items) / 2
	first, err := bisect(ctx, tx, items[:mid], insert)
	if err != nil {
		return nil, err
	}
	second, err := bisect(ctx, tx, items[mid:], insert)
	return append(first, second...), err
}

// refusedData reports whether Postgres refused a statement for the data
// it was given rather than for its own state: a data exception (class
// 22, e.g. bytes that text cannot hold), a program limit (54, e.g. an
// index entry too large) or an integrity constraint (23; the dedupe
// conflict never gets here, ON CONFLICT absorbs it).
func refusedData(err error) (*pgconn.PgError, bool) {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || len(pe.Code) != 5 {
		return nil, false
	}
	switch pe.Code[:2] {
	case "22", "23", "54":
		return pe, true
	}
	return nil, false
}

// refusedPoison is the DLQ entry of a job Postgres refused, with
// Postgres's own words as the error.
func (j NewJob) refusedPoison(pe *pgconn.PgError) Poison {
	reason := "decode"
	if strings.HasPrefix(pe.Code, "54") {
		reason = "too_large"
	}
	return Poison{Reason: reason, Route: j.Route, Queue: j.Queue,
		Error:   fmt.Sprintf("Postgres refused the job: %s (SQLSTATE %s)", pe.Message, pe.Code),
		Payload: j.Payload, HeaderKeys: j.HeaderKeys, HeaderVals: j.HeaderVals, RecordKey: j.RecordKey,
		Topic: j.Topic, Partition: j.Partition, Offset: j.Offset}
}

func isUniqueViolation(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "23505"
}

var copyColumns = []string{"origin", "route", "kind", "queue", "key", "version", "dedupe_key",
	"payload", "header_keys", "header_values", "max_attempts", "deadline",
	"src_topic", "src_partition", "src_offset", "lane", "grp", "scheduled_at", "record_at", "state"}

// jobRows yields COPY rows for jobs: with ids, for the jobs table itself
// (its id first, then copyColumns with the initial state, and now, the
// transaction's time, for the jobs that run at once); without, for the
// staging table, which draws the id, derives the state and fills in the
// time.
func jobRows(jobs []NewJob, ids []int64, now time.Time) pgx.CopyFromSource {
	return pgx.CopyFromSlice(len(jobs), func(i int) ([]any, error) {
		j := &jobs[i]
		at := j.RunAt
		if at == nil && ids != nil {
			at = &now
		}
		// nil slices would COPY as NULL into NOT NULL columns.
		row := []any{j.origin(), j.Route, j.Kind, j.Queue, j.Key, j.Version, j.DedupeKey,
			nonNilByte(j.Payload), nonNil(j.HeaderKeys), nonNilBytes(j.HeaderVals), j.MaxAttempts, j.Deadline,
			j.Topic, j.Partition, j.Offset, j.Lane != nil, j.group(), at, j.RecordAt}
		if ids != nil {
			row = append([]any{ids[i]}, row...)
			state := jobstate.Queued
			if j.Lane != nil {
				state = jobstate.Waiting
			}
			row = append(row, state)
		}
		return row, nil
	})
}

// keyColumns are the job_keys columns, in keyRows' order.
var keyColumns = []string{"job_id", "route", "origin", "dedupe_key", "key"}

// keyRows yields the job_keys rows of jobs, under their drawn ids.
func keyRows(jobs []NewJob, ids []int64) pgx.CopyFromSource {
	return pgx.CopyFromSlice(len(jobs), func(i int) ([]any, error) {
		j := &jobs[i]
		return []any{ids[i], j.Route, j.origin(), j.DedupeKey, j.Key}, nil
	})
}

// drawJobIDs draws n job ids from the jobs' sequence in one round trip:
// a job's id exists before its rows, which carry it. It also returns the
// transaction's now(), which the COPY writes as the scheduled_at of the
// jobs that run at once, as the column's default would.
func drawJobIDs(ctx context.Context, tx pgx.Tx, n int) ([]int64, time.Time, error) {
	b := &pgx.Batch{}
	var ids []int64
	var now time.Time
	queueJobIDs(b, n, &ids, &now)
	return ids, now, tx.SendBatch(ctx, b).Close()
}

// queueJobIDs is drawJobIDs as a statement of batch b, which sets ids and
// now.
func queueJobIDs(b *pgx.Batch, n int, ids *[]int64, now *time.Time) {
	// One row of an array, not n rows each with its own copy of now().
	// Sorted, so that the batch's ids follow its record order, which
	// coalescing relies on (the newest job of a key is its highest id).
	b.Queue(`SELECT array_agg(id ORDER BY id), now() FROM (SELECT nextval('jobs_id_seq') AS id FROM generate_series(1, $1)) ids`,
		n).QueryRow(func(r pgx.Row) error {
		return r.Scan(ids, now)
	})
}

func insertStaged(ctx context.Context, tx pgx.Tx, jobs []NewJob, res *IngestResult) error {
	if _, err := tx.Exec(ctx, stageDDL); err != nil {
		return err
	}
	staged, err := tx.CopyFrom(ctx, pgx.Identifier{"ingest_stage"}, copyColumns[:len(copyColumns)-1], jobRows(jobs, nil, time.Time{}))
	if err != nil {
		return fmt.Errorf("copy jobs: %w", err)
	}
	rows, err := tx.Query(ctx, stagedInsertSQL("", "ingest_stage"))
	if err != nil {
		return err
	}
	return res.countInserted(rows, staged)
}

// stagedInsertSQL inserts the staged rows of source that do not conflict
// (with, a CTE before the statement's, names source if it is not the
// staging table) into job_keys and jobs, and counts them by queue and
// route.
func stagedInsertSQL(with, source string) string {
	return `
		WITH ` + with + `k AS (
			INSERT INTO job_keys (job_id, route, origin, dedupe_key, key)
			-- No ORDER BY: rows are staged in offset order per partition
			-- already, so the first of two rows with one dedupe key wins,
			-- and sorting wide rows cost ~30% of ingest.
			SELECT id, route, origin, dedupe_key, key FROM ` + source + `
			ON CONFLICT (route, origin, dedupe_key) DO NOTHING
			RETURNING job_id
		), ins AS (
			INSERT INTO jobs (id, origin, route, kind, queue, state, key, version, dedupe_key, payload,
				header_keys, header_values, max_attempts, deadline, src_topic, src_partition, src_offset, lane, grp,
				scheduled_at, record_at)
			SELECT s.id, origin, route, kind, queue, CASE WHEN lane THEN 'waiting' ELSE 'queued' END, key, version,
				dedupe_key, payload, header_keys, header_values, max_attempts, deadline,
				src_topic, src_partition, src_offset, lane, grp, coalesce(s.scheduled_at, now()), s.record_at
			FROM ` + source + ` s JOIN k ON k.job_id = s.id
			RETURNING queue, route
		)
		SELECT queue, route, count(*) FROM ins GROUP BY queue, route`
}

// countInserted reads stagedInsertSQL's counts of staged rows into r.
func (r *IngestResult) countInserted(rows pgx.Rows, staged int64) error {
	var queue, route string
	var n int64
	r.InsertedByRoute = map[string]int64{}
	_, err := pgx.ForEachRow(rows, []any{&queue, &route, &n}, func() error {
		r.Inserted += n
		r.InsertedByRoute[route] += n
		if !slices.Contains(r.Queues, queue) {
			r.Queues = append(r.Queues, queue)
		}
		return nil
	})
	r.Duplicates = staged - r.Inserted
	return err
}

// smallBatch is the most jobs that ingestDirect inserts from arrays, in
// the round trip that moves the offsets, rather than by COPY. Below it,
// two COPYs' own cost (0.3 ms each for 5 rows, measured) and round trips
// outweigh what COPY saves per row.
const smallBatch = 64

// queueInsertArrays queues in b the insert of jobs as stagedInsertSQL
// does it, from parallel arrays rather than the staging table, and sets
// r's counts. Each job's headers are a slice of one flat array of all
// the batch's headers (arrays of arrays must be rectangular), bounded by
// the running sum of their counts.
func queueInsertArrays(b *pgx.Batch, jobs []NewJob, r *IngestResult) {
	n := len(jobs)
	origin, route, kind, queue, key, dedupe, topic := make([]string, n), make([]string, n), make([]string, n),
		make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	version, offset := make([]*int64, n), make([]int64, n)
	payload := make([][]byte, n)
	attempts, partition, headers := make([]int32, n), make([]int32, n), make([]int32, n)
	deadline, runAt, recordAt := make([]*time.Time, n), make([]*time.Time, n), make([]*time.Time, n)
	lane := make([]bool, n)
	grp := make([]*string, n)
	var hk []string
	var hv [][]byte
	for i := range jobs {
		j := &jobs[i]
		origin[i], route[i], kind[i], queue[i], key[i], dedupe[i], topic[i] = j.origin(), j.Route, j.Kind, j.Queue,
			j.Key, j.DedupeKey, j.Topic
		version[i], offset[i], payload[i] = j.Version, j.Offset, nonNilByte(j.Payload)
		attempts[i], partition[i], headers[i] = int32(j.MaxAttempts), j.Partition, int32(len(j.HeaderKeys))
		deadline[i], runAt[i], recordAt[i], lane[i], grp[i] = j.Deadline, j.RunAt, j.RecordAt, j.Lane != nil, j.group()
		hk, hv = append(hk, j.HeaderKeys...), append(hv, j.HeaderVals...)
	}
	b.Queue(stagedInsertSQL(`stage AS MATERIALIZED (
			SELECT nextval('jobs_id_seq') AS id, origin, route, kind, queue, key, version, dedupe_key, payload,
				coalesce(($18::text[])[hs:hs + hn - 1], '{}') AS header_keys,
				coalesce(($19::bytea[])[hs:hs + hn - 1], '{}') AS header_values,
				max_attempts, deadline, src_topic, src_partition, src_offset, lane, grp, scheduled_at, record_at
			FROM (
				SELECT *, (sum(hn) OVER (ORDER BY ord) - hn + 1)::int AS hs
				FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::bigint[], $7::text[],
					$8::bytea[], $9::int[], $10::timestamptz[], $11::text[], $12::int[], $13::bigint[], $14::bool[],
					$15::text[], $16::timestamptz[], $17::timestamptz[], $20::int[])
					WITH ORDINALITY AS u(origin, route, kind, queue, key, version, dedupe_key, payload, max_attempts,
						deadline, src_topic, src_partition, src_offset, lane, grp, scheduled_at, record_at, hn, ord)
			) u
			ORDER BY ord
		), `, "stage"),
		origin, route, kind, queue, key, version, dedupe, payload, attempts, deadline, topic, partition, offset, lane,
		grp, runAt, recordAt, nonNil(hk), nonNilBytes(hv), headers).Query(func(rows pgx.Rows) error {
		return r.countInserted(rows, int64(n))
	})
}

// batchLanes are the distinct lanes of a batch's ordered jobs, with their
// route's settings, in parallel arrays for unnest.
type batchLanes struct {
	route, key, policy, onDead, gapPolicy []string
	gapMS                                 []int64
}

func lanesOf(jobs []NewJob) batchLanes {
	type laneKey struct{ route, key string }
	seen := map[laneKey]bool{}
	var l batchLanes
	for _, j := range jobs {
		k := laneKey{j.Route, j.Key}
		if j.Lane == nil || seen[k] {
			continue
		}
		seen[k] = true
		l.route, l.key = append(l.route, j.Route), append(l.key, j.Key)
		l.policy, l.onDead = append(l.policy, j.Lane.Policy), append(l.onDead, j.Lane.OnDead)
		l.gapMS, l.gapPolicy = append(l.gapMS, j.Lane.GapTimeout.Milliseconds()), append(l.gapPolicy, j.Lane.GapPolicy)
	}
	return l
}

// upsertLanes creates the lanes of the batch's ordered jobs, or updates
// their settings when the route's changed. Lane rows are locked in
// (route, key) order, so two batches touching the same lanes cannot
// deadlock; ON CONFLICT DO UPDATE locks the row even when its WHERE leaves
// it unchanged, and writes only when the settings changed. (A batch that
// insertJobs had to split locks its lanes segment by segment: a deadlock
// there is an error like any other, and the whole batch is retried.)
func upsertLanes(ctx context.Context, tx pgx.Tx, jobs []NewJob) error {
	b := &pgx.Batch{}
	queueUpsertLanes(b, jobs)
	return sendBatch(ctx, tx, b)
}

// queueUpsertLanes queues upsertLanes's statement in b.
func queueUpsertLanes(b *pgx.Batch, jobs []NewJob) {
	if l := lanesOf(jobs); len(l.route) > 0 {
		b.Queue(`SELECT lanes_upsert($1, $2, $3, $4, $5, $6)`, l.route, l.key, l.policy, l.onDead, l.gapMS, l.gapPolicy)
	}
}

// queuePromoteLanes queues, in b, the promotion of a head in every idle
// lane of the batch's ordered jobs (upsertLanes made them). A refused job
// has no lane row of its own, and promotion only ever looks at rows that
// exist.
func queuePromoteLanes(b *pgx.Batch, jobs []NewJob) {
	if l := lanesOf(jobs); len(l.route) > 0 {
		b.Queue(`SELECT lanes_promote_idle($1, $2)`, l.route, l.key)
	}
}

// sendBatch sends b, if it holds anything, in tx.
func sendBatch(ctx context.Context, tx pgx.Tx, b *pgx.Batch) error {
	if b.Len() == 0 {
		return nil
	}
	return tx.SendBatch(ctx, b).Close()
}

// insertPoison parks poison records, once each however often they are
// redelivered. An entry that Postgres refuses for its data (as a refused
// job's entry could be, for the same bytes) is parked again without the
// record's bytes, under an error that says so: the position and the
// reason are what an operator needs, and the record is still in Kafka.
func insertPoison(ctx context.Context, tx pgx.Tx, ps []Poison) (int64, error) {
	var n int64
	insert := func(ps []Poison) error {
		batch := &pgx.Batch{}
		for _, p := range ps {
			batch.Queue(`
				INSERT INTO dlq_entries (reason, route, queue, src_topic, src_partition, src_offset,
					last_error, errors, payload, header_keys, header_values, record_key, truncated, record_bytes)
				VALUES ($1, $2, $3, $4, $5, $6, $7,
					jsonb_build_array(jsonb_build_object('error', $7::text, 'at', now())), $8, $9, $10, $11, $12, $13)
				ON CONFLICT DO NOTHING`,
				p.Reason, p.Route, p.Queue, p.Topic, p.Partition, p.Offset, p.Error, nonNilByte(p.Payload),
				nonNil(p.HeaderKeys), nonNilBytes(p.HeaderVals), p.RecordKey, p.Truncated, nullableInt(p.RecordBytes))
		}
		br := tx.SendBatch(ctx, batch)
		var parked int64
		for range ps {
			tag, err := br.Exec()
			if err != nil {
				br.Close()
				return err
			}
			parked += tag.RowsAffected()
		}
		if err := br.Close(); err != nil {
			return err
		}
		n += parked
		return nil
	}
	refused, err := bisect(ctx, tx, ps, insert)
	if err != nil || len(refused) == 0 {
		return n, err
	}
	bare := make([]Poison, len(refused))
	for i, r := range refused {
		p := r.job
		bare[i] = Poison{Reason: p.Reason, Route: p.Route, Queue: p.Queue, Topic: p.Topic, Partition: p.Partition,
			Offset: p.Offset, Truncated: true, RecordBytes: len(p.RecordKey) + len(p.Payload),
			Error: fmt.Sprintf("%s; parked without the record's bytes, which Postgres refused: %s (SQLSTATE %s)",
				truncate(p.Error, 2048), r.err.Message, r.err.Code)}
	}
	return n, insert(bare)
}

func nonNilByte(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

func nullableInt(n int) *int {
	if n == 0 {
		return nil
	}
	return &n
}

// queueOffsets queues the fence of I1 in batch b: each partition's
// stored position moves from exactly the value this consumer expects, or
// the statement fails (offsets_check, isOffsetsMoved), and with it the
// transaction: IngestCommit returns ErrOffsetFenced and nothing commits.
func queueOffsets(b *pgx.Batch, group string, advs []OffsetAdvance) {
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
		b.Queue(`
			WITH u AS (
				UPDATE kafka_offsets o SET next_offset = u.next, updated_at = now()
				FROM unnest($2::text[], $3::int[], $4::bigint[], $5::bigint[]) AS u(topic, part, expected, next)
				WHERE o.group_id = $1 AND o.topic = u.topic AND o.partition = u.part
				  AND o.next_offset = u.expected
				RETURNING 1
			)
			SELECT offsets_check(count(*), $6) FROM u`,
			group, uTopic, uPart, uExp, uNext, len(uTopic))
	}
	if len(iTopic) > 0 {
		b.Queue(`
			WITH i AS (
				INSERT INTO kafka_offsets (group_id, topic, partition, next_offset)
				SELECT $1, t, p, n FROM unnest($2::text[], $3::int[], $4::bigint[]) AS u(t, p, n)
				ON CONFLICT DO NOTHING
				RETURNING 1
			)
			SELECT offsets_check(count(*), $5) FROM i`,
			group, iTopic, iPart, iNext, len(iTopic))
	}
}

// queueLockOffsets queues, in b, the locking of the stored offsets of
// advs' partitions, in (topic, partition) order: it waits for any
// transaction that is moving one, so that the fence after it, a
// statement of its own, sees where that transaction left it.
func queueLockOffsets(b *pgx.Batch, group string, advs []OffsetAdvance) {
	topics, parts := make([]string, len(advs)), make([]int32, len(advs))
	for i, a := range advs {
		topics[i], parts[i] = a.Topic, a.Partition
	}
	b.Queue(`SELECT FROM kafka_offsets o JOIN unnest($2::text[], $3::int[]) AS u(topic, part)
		ON o.group_id = $1 AND o.topic = u.topic AND o.partition = u.part
		ORDER BY o.topic, o.partition FOR UPDATE OF o`, group, topics, parts)
}

// isOffsetsMoved reports whether err is offsets_check's.
func isOffsetsMoved(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "SY001"
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
