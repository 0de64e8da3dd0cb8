package pgstore

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/switchyard-dev/switchyard/internal/bulk"
)

// The batch statements whose plans TestBatchStatementsJoinByPrimaryKey
// checks.
var (
	CompleteSQL    = completeSQL
	HeartbeatSQL   = heartbeatSQL
	RestartSQL     = restartSQL
	ReleaseSQL     = releaseSQL
	HeartbeatChunk = heartbeatChunk
	JobListSQL     = jobListSQL
	CancelledSQL   = cancelledSQL
	UpdateHeldSQL  = updateHeldSQL
	ParkedCountSQL = parkedCountSQL
	PruneJobsSQL   = pruneJobsSQL

	JobsCancelSQL         = jobsCancelSQL
	LanesWaitingCancelSQL = lanesWaitingCancelSQL
	DLQRedriveManySQL     = dlqRedriveManySQL
	DLQDiscardManySQL     = dlqDiscardManySQL
	DLQRecordsSQL         = dlqRecordsSQL
	LockRecordEntriesSQL  = lockRecordEntriesSQL
	RecordJobIDsSQL       = recordJobIDsSQL
)

// The settings the hot statements run after, and the claim statements
// whose plans TestClaimPlanWalksTheClaimIndex checks.
var (
	PlanSQL           = planSQL
	ClaimUnlimitedSQL = claimUnlimitedSQL
	ClaimCappedSQL    = claimCappedSQL
	ClaimWindowSQL    = claimWindowSQL
	ClaimGroupedSQL   = claimGroupedSQL
	ClaimOneGroupSQL  = claimOneGroupSQL
)

// MigrateTo applies the migrations up to last, for tests of a migration
// on the rows of the ones before it.
func (s *Store) MigrateTo(ctx context.Context, last int) ([]string, error) {
	return s.migrateTo(ctx, last)
}

// OpenBatched opens a store whose connections run with the lane trigger
// switched off, as the completer's transactions do: every lane change
// through it must be followed by lanes_advance to take effect.
func OpenBatched(ctx context.Context, cfg Config) (*Store, error) {
	return open(ctx, cfg, map[string]string{"switchyard.lanes_batched": "on"})
}

// IngestCareful reports whether the next IngestCommit takes the careful
// path first.
func (s *Store) IngestCareful() bool { return s.ingestCareful.Load() }

// SetIngestCareful sets which path the next IngestCommit takes first.
func (s *Store) SetIngestCareful(careful bool) { s.ingestCareful.Store(careful) }

// DepthReuse is the rule QueueStats reuses a depth count by.
var DepthReuse = depthReuse

// SetDepthReuse replaces the store's reuse rule and forgets its last count.
func (s *Store) SetDepthReuse(reuse func(took time.Duration) time.Duration) {
	s.depthMu.Lock()
	defer s.depthMu.Unlock()
	s.depthReuse, s.depth = reuse, depthCount{}
}

// JobFind returns the job of a dedupe key in an origin's namespace, or
// ErrNotFound: which job a key made, for tests of dedupe.
func (s *Store) JobFind(ctx context.Context, route, origin, dedupeKey string) (JobRow, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+jobColumns+` FROM jobs_by_id(ARRAY(SELECT job_id FROM job_keys
		WHERE route = $1 AND origin = $2 AND dedupe_key = $3))`, route, origin, dedupeKey)
	if err != nil {
		return JobRow{}, err
	}
	j, err := pgx.CollectExactlyOneRow(rows, scanJob)
	return j, notFound(err)
}

// FunctionsHash is functionsHash, for TestFunctionsChangeWithAMigration.
var FunctionsHash = functionsHash

// HeldWindow is heldWindow, for TestQueueStatsPastALongHeldFlood.
const HeldWindow = heldWindow

// SetMigrateWaits shortens Migrate's lock waits for a test, which must not
// be parallel; the returned func restores them.
func SetMigrateWaits(lock time.Duration, tries int, pause time.Duration) (restore func()) {
	l, n, p := migrateLockTimeout, migrateTries, migrateRetryPause
	migrateLockTimeout, migrateTries, migrateRetryPause = lock, tries, pause
	return func() { migrateLockTimeout, migrateTries, migrateRetryPause = l, n, p }
}

// JobsCancelChunk is a bulk cancel's transaction for one chunk: the
// failures, and the lanes' jobs it left for JobCancel.
func (s *Store) JobsCancelChunk(ctx context.Context, ids []int64, by string) (map[int64]error, []int64, error) {
	return s.jobsCancel(ctx, ids, by)
}

// JobsCancel is a bulk cancel's act on one chunk (JobCancelMatching's).
func (s *Store) JobsCancel(ctx context.Context, ids []int64, by string) ([]bulk.Failure, error) {
	return s.cancelAct(by)(ctx, ids)
}
