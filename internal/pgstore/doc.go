// Package pgstore is the one place Switchyard talks SQL. Every runtime
// query lives here, named noun-then-verb (JobClaim, OffsetLoad, DLQList),
// and pgx errors are translated once at this boundary into ErrNotFound,
// ErrOffsetFenced and friends.
//
// All tables live in one schema chosen by configuration. The schema name
// is validated against an allow-list pattern and applied as the
// connection's search_path, so no query text is ever built from input.
//
// # Tables in migrations, functions in one file
//
// Tables, indexes and their data move in numbered migrations
// (migrations/NNNN_name.sql), each applied once and recorded in
// schema_migrations. Functions and triggers — the job and lane state
// machine: lane_promote, lanes_advance (the one definition of how a
// lane's head ends), and the trigger that sends every other head change
// through it — live in one file, functions.sql, the only live definition
// of each. The file is a Go template with one action, claim: the SET list
// of a claim (claimSet), which JobClaim's statement uses too, so that a
// claim is written once without a function call in the claim path.
// Migrate applies it, rendered, after the migrations, in the same
// transaction and under the same advisory lock, whenever its SHA-256
// differs from the one recorded in schema_functions; so the file is written to be re-run (CREATE OR
// REPLACE, DROP IF EXISTS for a signature that changed), and a migration
// must not depend on a function (on a new database none exists while the
// migrations run). A process refuses to start, and /readyz reports, when
// either the migrations or the functions are not this binary's
// (SchemaCheck). Migrate refuses a schema with a migration it does not
// know (NewerSchemaError): an older binary would put its older functions
// back under the newer fleet. That check sees versions, not hashes, so a
// change to functions.sql comes with a migration of its own, a comment if
// nothing else changes (TestFunctionsChangeWithAMigration holds it).
//
// # What a job's row carries
//
// A job is written three times — enqueued, claimed, finished — and each
// write that changes its state is a new row version with an entry in
// every index whose predicate it meets. So jobs has only indexes whose
// entries a state change must move anyway: the partial indexes of the
// runnable, running, waiting, finished and deadline paths, and the
// primary key. What never changes after the insert and is looked up —
// the dedupe key (I2), the key the admin API lists by — lives in
// job_keys, one row per job, written in the same statement or
// transaction as the job and deleted with it by retention (JobPrune);
// TestJobKeysFollowJobs holds every path to that. The ids come first
// (drawJobIDs, the staging table's default, or a small batch's
// materialized nextval: see IngestCommit) so that both rows carry the
// job's id.
//
// Reading lanes_advance therefore never needs the history of the
// migrations that once defined it: they keep their numbers and their
// reasons, and point here.
//
// # Where a finished job is kept
//
// A job that succeeds through the completer, the common end, does not
// stay in jobs: the completion that records it deletes its row (no new
// version, no index entry) and keeps it, with the rest of its batch's
// successes, as ONE row of job_history: an lz4-compressed array of
// job_view, the job as its readers see it, found by the span of the
// batch's ids. A lane job's lane then advances in the same transaction
// from the route, key and version its outcome carries (Outcome.Lane,
// lanes_advance's p_gone), as its row is gone. Every other job stays in
// jobs: running and waiting ones, retried ones, dead ones (the DLQ and
// re-drive work on the row), a lane job that succeeded in its handler's
// own transaction (JobApply: the per-row trigger advances its lane, and
// fires on an update, not a delete) and the few that end another way
// (cancelled, expired, skipped, coalesced). Readers of a job that may
// have finished read it through jobs_by_id (by id), job_history_page
// (JobList's pages) or the all_jobs view (operators, tests, the bench);
// retention drops whole batches with their job_keys rows, and replay
// --rerun brings a kept job back into jobs (job_history_restore). The
// dedupe window is job_keys', so it does not depend on where the job is.
// Why: "Finished jobs in batches" in docs/performance.md.
//
// # How the hot statements are planned
//
// A pool repeats a handful of statements thousands of times a second,
// each prepared once per connection. Postgres plans a prepared statement
// anew at every call while it judges that cheaper than its generic plan,
// and makes the generic plan from the statistics of the moment — which,
// for a queue, are often those of an empty table or of a moment when
// nothing ran. So each hot statement is written to have one good plan
// whatever the statistics: batch statements join by primary key (heldSQL);
// lanes_advance joins by key (TestLanesAdvanceJoinsByKey); and every
// statement of a lease — claim, completion, heartbeat, release, the
// held-job updates — runs after planSQL in its batch, which makes its
// plan generic and leaves the index walks as the only plans
// (TestClaimPlanWalksTheClaimIndex, TestBatchStatementsJoinByPrimaryKey):
// planning had been a fifth of every claim, and with a near-empty table's
// statistics every completion read all of jobs. lanes_advance, after a
// completion in its transaction, sets its own planner settings
// (functions.sql). And no plan is JIT-compiled (Open starts every
// connection with jit off): a generic claim plan is costed as a walk of
// the whole claim index, and past about 600,000 queued jobs Postgres
// compiled it at every claim.
package pgstore
