package pgstore

import (
	"context"
	"encoding/json"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/switchyard-dev/switchyard/jobstate"
)

// JobRow is a job as the admin API and CLI show it.
type JobRow struct {
	ID          int64          `json:"id"`
	Route       string         `json:"route"`
	Kind        string         `json:"kind"`
	Queue       string         `json:"queue"`
	State       jobstate.State `json:"state"`
	Key         string         `json:"key"`
	Version     *int64         `json:"version"`
	Attempts    int            `json:"attempts"`
	MaxAttempts int            `json:"max_attempts"`
	LastError   *string        `json:"last_error"`
	CreatedAt   time.Time      `json:"created_at"`
	ScheduledAt time.Time      `json:"scheduled_at"`
	StartedAt   *time.Time     `json:"started_at"`
	FinishedAt  *time.Time     `json:"finished_at"`
	Source      *SourceRow     `json:"source"`
}

// SourceRow is a Kafka position; nil for jobs that did not come from Kafka.
type SourceRow struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
}

const jobColumns = `id, route, kind, queue, state, key, version, attempts, max_attempts, last_error,
	created_at, scheduled_at, started_at, finished_at, src_topic, src_partition, src_offset`

func scanJob(r pgx.CollectableRow) (JobRow, error) { return scanJobRow(r) }

// scanJobRow scans jobColumns, then extra.
func scanJobRow(r pgx.Row, extra ...any) (JobRow, error) {
	var j JobRow
	var topic *string
	var part *int32
	var off *int64
	err := r.Scan(append([]any{&j.ID, &j.Route, &j.Kind, &j.Queue, &j.State, &j.Key, &j.Version, &j.Attempts,
		&j.MaxAttempts, &j.LastError, &j.CreatedAt, &j.ScheduledAt, &j.StartedAt, &j.FinishedAt,
		&topic, &part, &off}, extra...)...)
	if topic != nil && part != nil && off != nil {
		j.Source = &SourceRow{Topic: *topic, Partition: *part, Offset: *off}
	}
	return j, err
}

// JobGet returns one job or ErrNotFound.
func (s *Store) JobGet(ctx context.Context, id int64) (JobRow, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+jobColumns+` FROM jobs_by_id(ARRAY[$1::bigint])`, id)
	if err != nil {
		return JobRow{}, err
	}
	j, err := pgx.CollectExactlyOneRow(rows, scanJob)
	return j, notFound(err)
}

// JobResult is a job's kept result (Data nil: none), or ErrNotFound
// when the job does not exist.
func (s *Store) JobResult(ctx context.Context, id int64) (contentType string, data []byte, err error) {
	var ct *string
	err = s.pool.QueryRow(ctx, `SELECT result_type, result FROM jobs_by_id(ARRAY[$1::bigint])`, id).Scan(&ct, &data)
	if ct != nil {
		contentType = *ct
	}
	return contentType, data, notFound(err)
}

// JobDetail is a job with its kept result: what GET /v1/jobs/{id} and
// `switchyard jobs get` show.
type JobDetail struct {
	JobRow
	Result *ResultView `json:"result,omitempty"`
	// The job's payload and headers, as its target receives them, and
	// its attempts' errors (oldest first, as stored).
	Payload []byte          `json:"payload_base64"`
	Headers []HeaderRow     `json:"headers"`
	Errors  json.RawMessage `json:"errors"`
	// Lane is where the job stands in its key's lane; nil outside lanes.
	Lane *LanePosition `json:"lane,omitempty"`
	// Group is the job's group and its cap; nil unless the config gives
	// the job's route a group.
	Group *GroupPosition `json:"group,omitempty"`
	// Redrives are the DLQ re-drives that put this job back to run (or,
	// for a parked record, made it), oldest first. A re-drive counts the
	// job's attempts from 1 again and keeps its errors: these say where in
	// Errors one run ends and the next begins.
	Redrives []JobRedrive `json:"redrives"`
	// DLQEntryID is the DLQ entry a dead job is parked in, which re-drives
	// or discards it; nil for a job that is not parked.
	DLQEntryID *int64 `json:"dlq_entry_id"`
}

// JobRedrive is a re-drive of a job: its DLQ entry, when and by whom (as
// the entry's Redrive says it), and ErrorsBefore, how many of the job's
// Errors were recorded before it: the re-drive falls between
// Errors[ErrorsBefore-1] and Errors[ErrorsBefore]. It is counted here, by
// the database's own clock to the microsecond, so that no client has to
// compare timestamps to find the place.
type JobRedrive struct {
	EntryID      int64     `json:"entry_id"`
	At           time.Time `json:"at"`
	By           string    `json:"by"`
	ErrorsBefore int       `json:"errors_before"`
}

// LanePosition is a lane job's place: Position jobs are ahead of it (0:
// it is the head), Waiting jobs wait behind the head, HeadJobID is the
// head (nil while none), Blocked says a dead head holds the lane.
// LastApplied is a versioned lane's last applied version, which a job is
// judged stale against (nil: none yet, or a lane without versions); Gap
// is set while a strict lane holds for a missing version, which is why
// such a lane has no head.
type LanePosition struct {
	Position    int64    `json:"position"`
	Waiting     int64    `json:"waiting"`
	HeadJobID   *int64   `json:"head_job_id"`
	Blocked     bool     `json:"blocked"`
	LastApplied *int64   `json:"last_applied_version"`
	Gap         *LaneGap `json:"gap"`
}

// LaneGap is a strict lane's hold on a missing version: the Awaited
// version (the one after the last it applied or passed), held Since, and
// Until its gap_timeout ends, when the rescuer's sweep applies Policy
// (gap_policy: park parks the lane's next job, proceed runs it).
type LaneGap struct {
	Awaited int64     `json:"awaited_version"`
	Since   time.Time `json:"since"`
	Until   time.Time `json:"until"`
	Policy  string    `json:"policy"`
}

// GroupPosition is a grouped job's group: its Value, the route's
// MaxRunning for each group (from the config), how many of the group's
// jobs are Running now, and whether the cap is what holds this one: Held
// is a job that could run but for its group's cap, which SPEC §1 calls
// waiting behind its group's head. It stays queued in the job's state:
// the cap is kept by the counted claim, which writes no job row when a
// group fills or frees (internal/flow/doc.go). heldGroups finds the
// same groups for the queues' ages.
type GroupPosition struct {
	Value      string `json:"value"`
	MaxRunning int    `json:"max_running"`
	Running    int64  `json:"running"`
	Held       bool   `json:"held"`
}

// ResultView is a kept result: its content type, size and bytes (base64
// in JSON; GET /v1/jobs/{id}/result answers them raw).
type ResultView struct {
	ContentType string `json:"content_type"`
	Bytes       int    `json:"bytes"`
	Base64      []byte `json:"body_base64"`
}

// jobLaneRowSQL is the lanes row of a job's lane (jobs), as l: only the
// columns jobLaneSQL reads, so that none shadows a job's own (route, key)
// in the select list beside it.
const jobLaneRowSQL = `SELECT head_job_id, blocked, policy, last_version, passed_version, gap_since, gap_timeout, gap_policy
	FROM lanes WHERE jobs.lane AND lanes.route = jobs.route AND lanes.key = jobs.key`

// jobLaneSQL reads a job's place in its lane (l: jobLaneRowSQL). A
// lane's waiting jobs are promoted in (version NULLS FIRST, offset, id)
// order, an API job (no offset) after the records of its version: the
// coalesces spell that order for the row comparison. The version a
// strict lane's gap awaits is lane_promote's: the one after the greater
// of the last applied and the last passed.
const jobLaneSQL = `jobs.lane, l.head_job_id, coalesce(l.blocked, false),
	CASE WHEN l.policy <> 'none' THEN l.last_version END,
	greatest(l.last_version, l.passed_version) + 1, l.gap_since, l.gap_since + l.gap_timeout, l.gap_policy,
	(SELECT count(*) FROM jobs w WHERE jobs.lane AND w.route = jobs.route AND w.key = jobs.key AND w.state = 'waiting'),
	(SELECT count(*) FROM jobs w WHERE jobs.lane AND jobs.state = 'waiting' AND w.route = jobs.route AND w.key = jobs.key
		AND w.state = 'waiting'
		AND (coalesce(w.version, -9223372036854775808), coalesce(w.src_offset, 9223372036854775807), w.id)
		  < (coalesce(jobs.version, -9223372036854775808), coalesce(jobs.src_offset, 9223372036854775807), jobs.id))`

// jobRedrivesSQL reads a job's re-drives (JobDetail.Redrives) by
// dlq_entries_redrive_job_idx. A re-driven entry stays (until its job is
// pruned), and a job that dies again is parked in a new entry: each
// re-drive is an entry of its own. Those that ran the job again (a dead
// job's entry) or made it (a parked record's, in the job's own
// transaction) count; a parked record whose re-drive found its job
// already there links to it but did not run it.
const jobRedrivesSQL = `(SELECT coalesce(jsonb_agg(jsonb_build_object('entry_id', d.id, 'at', d.redriven_at,
		'by', d.redriven_by, 'errors_before', (SELECT count(*) FROM jsonb_array_elements(jobs.errors) e
			WHERE (e->>'at')::timestamptz < d.redriven_at)) ORDER BY d.redriven_at, d.id), '[]')
	FROM dlq_entries d WHERE d.redrive_job_id = jobs.id AND (d.job_id IS NOT NULL OR jobs.created_at >= d.redriven_at))`

// jobParkedSQL reads the entry a job is parked in, by
// dlq_entries_job_idx (one parked entry a job at most).
const jobParkedSQL = `(SELECT id FROM dlq_entries d WHERE d.job_id = jobs.id AND d.redriven_at IS NULL)`

// jobGroupSQL reads a grouped job's group ($2: the routes that have one
// in the config) and how many of its jobs run, by
// jobs_group_running_idx; and whether the job could run now but for the
// group's cap.
const jobGroupSQL = `CASE WHEN jobs.route = ANY($2::text[]) THEN jobs.grp END,
	(SELECT count(*) FROM jobs r WHERE jobs.route = ANY($2::text[]) AND r.route = jobs.route AND r.grp = jobs.grp
		AND r.state = 'running'),
	jobs.state IN ('queued', 'retrying') AND jobs.scheduled_at <= now()`

// JobGetDetail returns one job with its result, payload, headers, errors,
// lane position, group and re-drives, or ErrNotFound. g says which
// routes have a group and its cap.
func (s *Store) JobGetDetail(ctx context.Context, id int64, g Groups) (JobDetail, error) {
	var ct *string
	var data []byte
	var d JobDetail
	var hk []string
	var hv [][]byte
	var lane bool
	var l LanePosition
	var ahead int64
	var awaited *int64
	var gapSince, gapUntil *time.Time
	var gapPolicy *string
	var group *string
	var running int64
	var runnable bool
	grouped := make([]string, 0, len(g.Routes))
	for r := range g.Routes {
		grouped = append(grouped, r)
	}
	job, err := scanJobRow(s.pool.QueryRow(ctx, `SELECT `+jobColumns+`, result_type, result,
		payload, header_keys, header_values, errors, `+jobLaneSQL+`, `+jobRedrivesSQL+`, `+jobParkedSQL+`, `+jobGroupSQL+`
		FROM jobs_by_id(ARRAY[$1::bigint]) jobs LEFT JOIN LATERAL (`+jobLaneRowSQL+`) l ON true`, id, grouped),
		&ct, &data, &d.Payload, &hk, &hv, &d.Errors, &lane, &l.HeadJobID, &l.Blocked, &l.LastApplied,
		&awaited, &gapSince, &gapUntil, &gapPolicy, &l.Waiting, &ahead, &d.Redrives, &d.DLQEntryID, &group, &running, &runnable)
	if err != nil {
		return JobDetail{}, notFound(err)
	}
	if group != nil {
		limit := g.Routes[job.Route].Cap
		d.Group = &GroupPosition{Value: *group, MaxRunning: limit, Running: running, Held: runnable && running >= int64(limit)}
	}
	d.JobRow = job
	d.Payload = nonNilByte(d.Payload)
	d.Headers = []HeaderRow{}
	for i := range hk {
		if i < len(hv) {
			d.Headers = append(d.Headers, HeaderRow{Key: hk[i], Value: hv[i]})
		}
	}
	// A finished job has left its lane, unless it is the dead head that
	// blocks it.
	if lane && (!job.State.IsFinal() || (l.HeadJobID != nil && *l.HeadJobID == job.ID)) {
		if job.State == jobstate.Waiting {
			l.Position = ahead
			if l.HeadJobID != nil {
				l.Position++
			}
		}
		if gapSince != nil && awaited != nil {
			l.Gap = &LaneGap{Awaited: *awaited, Since: *gapSince, Until: *gapUntil, Policy: *gapPolicy}
		}
		d.Lane = &l
	}
	if data != nil {
		d.Result = &ResultView{Bytes: len(data), Base64: data}
		if ct != nil {
			d.Result.ContentType = *ct
		}
	}
	return d, nil
}

// JobFilter selects jobs for listing; empty fields do not filter. Results
// are ordered by id and resume after After (keyset pagination).
type JobFilter struct {
	State jobstate.State
	Queue string
	Key   string
	Route string
	After int64
	Limit int
}

// JobList lists jobs by filter. The filter is bound as parameters; a
// NULL parameter matches everything, so the query text never changes.
func (s *Store) JobList(ctx context.Context, f JobFilter) ([]JobRow, error) {
	rows, err := s.pool.Query(ctx, jobListSQL(f.State, f.Key != ""), nullable(string(f.State)), nullable(f.Queue),
		nullable(f.Key), f.After, f.Limit, nullable(f.Route))
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, scanJob)
}

// jobListSQL is JobList's statement for a state filter and a key filter
// or none. The state condition is spelled out rather than written "$1 IS
// NULL OR state = $1": a prepared statement's generic plan can make
// neither an index condition of that nor see that an unfinished state is
// in jobs_active_idx, and read the primary key instead — through every
// finished job before the first queued one (2M retained jobs: 450 ms for
// a page of queued ones). TestJobListReadsTheStatesIndex holds it.
//
// Succeeded jobs are kept in job_history too (migration 0029). By key,
// the job_keys index drives the page and jobs_by_id reads each job
// wherever it is. Otherwise a page is jobs' page merged with
// job_history's, read up to the last id of jobs' page when that page is
// full: no later kept job can be on it.
func jobListSQL(st jobstate.State, byKey bool) string {
	filters := func(j string) string {
		state := `$1::text IS NULL`
		switch {
		case st.IsFinal():
			state = j + `state = $1`
		case st != "":
			state = j + `state = $1 AND ` + j + `state IN ('waiting', 'queued', 'running', 'retrying')`
		}
		return state + ` AND ($2::text IS NULL OR ` + j + `queue = $2) AND ($6::text IS NULL OR ` + j + `route = $6)`
	}
	if byKey {
		return `SELECT ` + jobColumns + ` FROM (SELECT j.* FROM job_keys k, jobs_by_id(ARRAY[k.job_id]) j
			WHERE k.key = $3 AND k.job_id > $4 AND ` + filters("j.") + `
			ORDER BY k.job_id LIMIT $5) page
		ORDER BY id`
	}
	live := `SELECT ` + jobColumns + ` FROM jobs
		WHERE ` + filters("") + ` AND $3::text IS NULL AND id > $4
		ORDER BY id LIMIT $5`
	if st != "" && st != jobstate.Succeeded {
		return live
	}
	return `WITH live AS (` + live + `)
		SELECT * FROM live
		UNION ALL
		SELECT ` + jobColumns + ` FROM job_history_page($4, (SELECT max(id) FROM live HAVING count(*) >= $5), $5::integer, $2, $6)
		ORDER BY id LIMIT $5`
}

// DLQEntry is a parked job or record.
type DLQEntry struct {
	ID        int64           `json:"id"`
	Reason    string          `json:"reason"`
	Route     string          `json:"route"`
	Queue     string          `json:"queue"`
	JobID     *int64          `json:"job_id"`
	Source    *SourceRow      `json:"source"`
	Attempts  int             `json:"attempts"`
	LastError string          `json:"last_error"`
	Errors    json.RawMessage `json:"errors,omitempty"`
	CreatedAt time.Time       `json:"created_at"`
	// Truncated says the entry keeps only a prefix of its record, which
	// was RecordBytes long (dlq.max_payload_bytes); a re-drive reads the
	// whole record from Kafka again.
	Truncated   bool `json:"truncated"`
	RecordBytes *int `json:"record_bytes,omitempty"`
	// The record's bytes: only in DLQGet's answer, never in a list, so
	// that a page of entries costs a bounded amount of memory whatever
	// the records held.
	Payload   []byte      `json:"payload_base64,omitempty"`
	Headers   []HeaderRow `json:"headers,omitempty"`
	RecordKey []byte      `json:"record_key_base64,omitempty"`
	// Redriven says what became of an entry that was re-driven; nil while
	// it is parked.
	Redriven *Redrive `json:"redriven"`
}

// Redrive is an entry's re-drive: when, by whom (an admin token's name,
// cli:<user>, or "replay --rerun"), the job it made or revived, and that
// job's state now — its new outcome, once it has one.
type Redrive struct {
	At       time.Time       `json:"at"`
	By       string          `json:"by"`
	JobID    int64           `json:"job_id"`
	JobState *jobstate.State `json:"job_state"`
}

// HeaderRow is one record header; the value is base64 in JSON because
// Kafka header values are bytes.
type HeaderRow struct {
	Key   string `json:"key"`
	Value []byte `json:"value_base64"`
}

// dlqSummary is what a list shows of an entry; dlqColumns adds its bytes
// and history.
const (
	dlqSummary = `id, reason, route, queue, job_id, src_topic, src_partition, src_offset,
	attempts, last_error, created_at, truncated, record_bytes, redriven_at, redriven_by, redrive_job_id,
	(SELECT state FROM jobs_by_id(ARRAY[dlq_entries.redrive_job_id]))`
	dlqColumns = dlqSummary + `, errors, payload, header_keys, header_values, record_key`
)

// scanDLQ scans dlqColumns, or only dlqSummary when !full.
func scanDLQ(full bool) pgx.RowToFunc[DLQEntry] {
	return func(r pgx.CollectableRow) (DLQEntry, error) { return scanDLQRow(r, full) }
}

func scanDLQRow(r pgx.CollectableRow, full bool) (DLQEntry, error) {
	var e DLQEntry
	var topic *string
	var part *int32
	var off *int64
	var hk []string
	var hv [][]byte
	var rAt *time.Time
	var rBy *string
	var rJob *int64
	var rState *jobstate.State
	dest := []any{&e.ID, &e.Reason, &e.Route, &e.Queue, &e.JobID, &topic, &part, &off,
		&e.Attempts, &e.LastError, &e.CreatedAt, &e.Truncated, &e.RecordBytes, &rAt, &rBy, &rJob, &rState}
	if full {
		dest = append(dest, &e.Errors, &e.Payload, &hk, &hv, &e.RecordKey)
	}
	err := r.Scan(dest...)
	if rAt != nil && rBy != nil && rJob != nil {
		e.Redriven = &Redrive{At: *rAt, By: *rBy, JobID: *rJob, JobState: rState}
	}
	if topic != nil && part != nil && off != nil {
		e.Source = &SourceRow{Topic: *topic, Partition: *part, Offset: *off}
	}
	if full {
		e.Payload = nonNilByte(e.Payload)
		e.Headers = []HeaderRow{}
		for i := range hk {
			if i < len(hv) {
				e.Headers = append(e.Headers, HeaderRow{Key: hk[i], Value: hv[i]})
			}
		}
	}
	return e, err
}

// The states a DLQ list selects: entries still parked, entries
// re-driven (history), or both.
const (
	DLQParked   = "parked"
	DLQRedriven = "redriven"
	DLQAll      = "all"
)

// DLQStates are the values of DLQFilter.State.
var DLQStates = []string{DLQParked, DLQRedriven, DLQAll}

// DLQFilter selects DLQ entries; empty fields do not filter.
type DLQFilter struct {
	Queue  string
	Reason string
	Route  string
	// State is DLQParked (the default, also ""), DLQRedriven or DLQAll.
	State string
	After int64
	// Through is the last id selected; 0 selects to the end. A bulk
	// re-drive sets it to DLQLastID as it starts, so that it never
	// reaches the entries parked since (DLQLastID says why).
	Through int64
	Limit   int
}

// DLQList lists DLQ entries by id, without their bytes and error history
// (see DLQEntry).
func (s *Store) DLQList(ctx context.Context, f DLQFilter) ([]DLQEntry, error) {
	state := f.State
	if state == "" {
		state = DLQParked
	}
	rows, err := s.pool.Query(ctx, `SELECT `+dlqSummary+` FROM dlq_entries
		WHERE ($1::text IS NULL OR queue = $1) AND ($2::text IS NULL OR reason = $2)
		  AND ($3::text IS NULL OR route = $3) AND id > $4 AND ($7::bigint = 0 OR id <= $7)
		  AND ($6::text = 'all' OR (redriven_at IS NULL) = ($6::text = 'parked'))
		ORDER BY id LIMIT $5`, nullable(f.Queue), nullable(f.Reason), nullable(f.Route), f.After, f.Limit, state, f.Through)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, scanDLQ(false))
}

// DLQCount counts the parked entries that match f (its State, After and
// Limit are ignored): what a re-drive of all of them would re-drive.
func (s *Store) DLQCount(ctx context.Context, f DLQFilter) (int64, error) {
	var n int64
	err := s.pool.QueryRow(ctx, `SELECT count(*) FROM dlq_entries
		WHERE redriven_at IS NULL AND ($1::text IS NULL OR queue = $1) AND ($2::text IS NULL OR reason = $2)
		  AND ($3::text IS NULL OR route = $3) AND ($4::bigint = 0 OR id <= $4)`,
		nullable(f.Queue), nullable(f.Reason), nullable(f.Route), f.Through).Scan(&n)
	return n, err
}

// DLQLastID is the id of the newest DLQ entry (0: none), the bound of a
// bulk re-drive (DLQFilter.Through). Entries are read by id, and a job
// put back while its target is still broken dies again and is parked
// under a new, larger id: a re-drive that read on to the end would
// re-drive those too, again and again for as long as the workers kept
// up, past the count a person confirmed.
func (s *Store) DLQLastID(ctx context.Context) (int64, error) {
	var id int64
	err := s.pool.QueryRow(ctx, `SELECT coalesce(max(id), 0) FROM dlq_entries`).Scan(&id)
	return id, err
}

// DLQGet returns one entry or ErrNotFound.
func (s *Store) DLQGet(ctx context.Context, id int64) (DLQEntry, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+dlqColumns+` FROM dlq_entries WHERE id = $1`, id)
	if err != nil {
		return DLQEntry{}, err
	}
	e, err := pgx.CollectExactlyOneRow(rows, scanDLQ(true))
	return e, notFound(err)
}

// DLQRecords returns, in id order, the entries among ids that are parked
// records, as many as fit in budget bytes of records: the memory a chunk
// of them costs is bounded whatever they hold. A record kept whole comes
// with its bytes, and one kept in part counts its whole size (it is read
// again from Kafka); a record larger than budget alone is left out.
func (s *Store) DLQRecords(ctx context.Context, ids []int64, budget int) (entries []DLQEntry, err error) {
	// After planSQL, as a chunk's statements: by primary key whatever
	// the statistics say.
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, planSQL); err != nil {
			return err
		}
		rows, _ := tx.Query(ctx, dlqRecordsSQL, ids, budget)
		entries, err = pgx.CollectRows(rows, scanDLQ(true))
		return err
	})
	return entries, err
}

// dlqRecordsSQL is DLQRecords's statement for entries $1 and budget $2.
var dlqRecordsSQL = `SELECT ` + dlqColumns + ` FROM (
		SELECT *, sum(size) OVER (ORDER BY id) AS upto FROM (
			SELECT *, CASE WHEN truncated THEN coalesce(record_bytes, 0) ELSE octet_length(payload) + coalesce(octet_length(record_key), 0)
				+ coalesce((SELECT sum(octet_length(v)) FROM unnest(header_values) v), 0) END AS size
			FROM dlq_entries WHERE id = ANY($1::bigint[]) AND job_id IS NULL AND redrive_job_id IS NULL
		) dlq_entries WHERE size <= $2
	) dlq_entries WHERE upto <= $2 ORDER BY id`

// QueueStat is the health of one queue.
type QueueStat struct {
	Queue string `json:"queue"`
	// Depth by state, non-terminal states plus dead.
	Jobs map[string]int64 `json:"jobs"`
	// OldestRunnableAgeSeconds is how long the oldest job that could run
	// now has waited; 0 when none. THE latency signal.
	OldestRunnableAgeSeconds float64          `json:"oldest_runnable_age_seconds"`
	Running                  int64            `json:"running"`
	Dead                     int64            `json:"dead"`
	DLQ                      map[string]int64 `json:"dlq"`
	// Paused: an operator paused the queue; nothing claims from it.
	Paused bool `json:"paused"`
	// OldestWaitingAgeSeconds is the age of the oldest job waiting behind
	// a lane's head: a stuck key shows here; 0 when none.
	OldestWaitingAgeSeconds float64 `json:"oldest_waiting_age_seconds"`
	// ArrivedTotal and FinishedTotal are the fleet's counts of the jobs
	// that arrived in the queue and finished from it, summed over every
	// process's counts since it started (queue_flow): rates are their
	// differences over time; a fall means a count was reset.
	ArrivedTotal  int64 `json:"arrived_total"`
	FinishedTotal int64 `json:"finished_total"`
	// Concurrency is the queue's configured concurrency in the answering
	// process; 0 for a queue it does not configure.
	Concurrency int `json:"concurrency"`
}

// Reserved is the depth key of a queue's claimed-but-unstarted jobs
// (0011_reservations.sql): running rows, counted apart from running.
const Reserved = "reserved"

// QueueStats reads depth by state (and Reserved) and the oldest runnable
// age for every queue. Terminal states other than dead are not counted: they grow
// without bound and are history, not depth. The depth, and the oldest
// waiting age counted with it, may be a count reused while depthReuse
// allows; everything else is read afresh.
//
// groups are the config's group caps (heldgroups.go): a queued job of a
// group at its cap is held behind its group's head, as a lane's waiting
// job is behind its lane's, and counts in the oldest waiting age, not the
// runnable one.
func (s *Store) QueueStats(ctx context.Context, groups Groups) (map[string]*QueueStat, error) {
	out := map[string]*QueueStat{}
	get := func(q string) *QueueStat {
		if out[q] == nil {
			out[q] = &QueueStat{Queue: q, Jobs: map[string]int64{}, DLQ: map[string]int64{}}
		}
		return out[q]
	}
	depth, err := s.queueDepth(ctx)
	if err != nil {
		return nil, err
	}
	for _, d := range depth {
		qs := get(d.queue)
		qs.Jobs[d.state] = d.n
		if d.state == string(jobstate.Waiting) {
			qs.OldestWaitingAgeSeconds = d.waitingAge
		}
		switch d.state {
		case string(jobstate.Running):
			qs.Running = d.n
		case string(jobstate.Dead):
			qs.Dead = d.n
		}
	}
	// Reserved jobs are running rows no handler runs yet: reported apart.
	for _, qs := range out {
		if r := qs.Jobs[Reserved]; r > 0 {
			qs.Running = max(0, qs.Running-r)
			qs.Jobs[string(jobstate.Running)] = qs.Running
		}
	}
	// The oldest runnable job of each queue is the first entry of its
	// range of the claim index: the queues are found by skipping from one
	// to the next in that index, so the cost is per queue, not per job.
	rows, err := s.pool.Query(ctx, `
		WITH RECURSIVE q(queue) AS (
			(SELECT queue FROM jobs WHERE state IN ('queued', 'retrying') ORDER BY queue LIMIT 1)
			UNION ALL
			SELECT (SELECT j.queue FROM jobs j WHERE j.state IN ('queued', 'retrying') AND j.queue > q.queue
				ORDER BY j.queue LIMIT 1)
			FROM q WHERE q.queue IS NOT NULL
		)
		SELECT q.queue, extract(epoch FROM now() - o.scheduled_at)::float8
		FROM q CROSS JOIN LATERAL (
			SELECT scheduled_at FROM jobs j
			WHERE j.queue = q.queue AND j.state IN ('queued', 'retrying') AND j.scheduled_at <= now()
			ORDER BY j.scheduled_at LIMIT 1
		) o
		WHERE q.queue IS NOT NULL`)
	if err != nil {
		return nil, err
	}
	var q string
	var n int64
	var age float64
	_, err = pgx.ForEachRow(rows, []any{&q, &age}, func() error {
		get(q).OldestRunnableAgeSeconds = age
		return nil
	})
	if err != nil {
		return nil, err
	}
	// A queue with a group at its cap: that group's jobs are waiting, and
	// the runnable age is that of the oldest job of the others.
	held, err := s.heldGroups(ctx, groups)
	if err != nil {
		return nil, err
	}
	for q, age := range held.waitingAge {
		qs := get(q)
		qs.OldestWaitingAgeSeconds = max(qs.OldestWaitingAgeSeconds, age)
		if qs.OldestRunnableAgeSeconds, err = s.runnableBesideHeld(ctx, q, groups, held); err != nil {
			return nil, err
		}
	}
	var arrived, finished int64
	rows, err = s.pool.Query(ctx, `SELECT queue, sum(arrived)::bigint, sum(finished)::bigint FROM queue_flow GROUP BY queue`)
	if err != nil {
		return nil, err
	}
	_, err = pgx.ForEachRow(rows, []any{&q, &arrived, &finished}, func() error {
		qs := get(q)
		qs.ArrivedTotal, qs.FinishedTotal = arrived, finished
		return nil
	})
	if err != nil {
		return nil, err
	}
	rows, err = s.pool.Query(ctx, parkedCountSQL)
	if err != nil {
		return nil, err
	}
	var reason string
	_, err = pgx.ForEachRow(rows, []any{&q, &reason, &n}, func() error {
		get(q).DLQ[reason] = n
		return nil
	})
	return out, err
}

// depthCount is a count of a queue's jobs by state (QueueStats), and
// until when it may stand for a new one.
type depthCount struct {
	rows  []depthRow
	until time.Time
}

type depthRow struct {
	queue, state string
	n            int64
	waitingAge   float64 // the oldest waiting job's age, for state waiting
}

// depthReuse says how long a count of the jobs by state is reused, from
// how long it took. The count reads every active job: a backlog of millions makes it
// take seconds, and the sampler of every process asks every few seconds,
// as does each open dashboard. Reused for twenty times its duration, it
// takes at most a twentieth of the time of one connection, however often
// it is asked; a count under 50 ms is never reused, so the depth stays
// exact wherever counting is cheap.
func depthReuse(took time.Duration) time.Duration {
	if took < 50*time.Millisecond {
		return 0
	}
	return 20 * took
}

// queueDepth counts the jobs of every queue by state (and Reserved), or
// returns the last count while depthReuse allows. One count runs at a
// time: a caller that arrives during a slow one gets its result.
func (s *Store) queueDepth(ctx context.Context) ([]depthRow, error) {
	s.depthMu.Lock()
	defer s.depthMu.Unlock()
	if time.Now().Before(s.depth.until) {
		return s.depth.rows, nil
	}
	start := time.Now()
	// One branch per partial index, so that each count reads only the
	// rows of its states and never the finished history (one query over
	// all five states read the whole table: a parallel seq scan of every
	// retained job on each sample).
	rows, err := s.pool.Query(ctx, `
		SELECT queue, state, count(*), 0::float8 FROM jobs WHERE state IN ('queued', 'retrying') GROUP BY queue, state
		UNION ALL SELECT queue, 'running', count(*), 0 FROM jobs WHERE state = 'running' GROUP BY queue
		UNION ALL SELECT queue, 'waiting', count(*), extract(epoch FROM now() - min(created_at)) FROM jobs
			WHERE state = 'waiting' GROUP BY queue
		UNION ALL SELECT queue, 'dead', count(*), 0 FROM jobs WHERE state = 'dead' GROUP BY queue
		UNION ALL SELECT queue, 'reserved', sum(reserved), 0 FROM reservations
			WHERE updated_at > now() - interval '`+reservationsFresh+`' GROUP BY queue`)
	if err != nil {
		return nil, err
	}
	var out []depthRow
	var d depthRow
	_, err = pgx.ForEachRow(rows, []any{&d.queue, &d.state, &d.n, &d.waitingAge}, func() error {
		out = append(out, d)
		return nil
	})
	if err != nil {
		return nil, err
	}
	s.depth = depthCount{rows: out, until: time.Now().Add(s.depthReuse(time.Since(start)))}
	return out, nil
}

// parkedCountSQL counts the parked DLQ entries by queue and reason. It is
// answerable from dlq_entries_parked_idx (migration 0028) alone, which an
// index-only scan reads instead of the DLQ's heap once vacuum has marked
// its pages all-visible.
const parkedCountSQL = `SELECT queue, reason, count(*) FROM dlq_entries WHERE redriven_at IS NULL
		GROUP BY queue, reason`

func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
