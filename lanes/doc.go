// Package lanes documents and tests per-key lanes: in an ordered route,
// one job per key runs at a time, across every pool and process, and jobs
// of a key start in (version, then offset) order (I3). Different keys run
// in parallel up to the queue's concurrency, whatever the partition count.
//
// The mechanism lives in Postgres (the lanes table of migration 0002, the
// functions of internal/pgstore/functions.sql), because that is where
// every process already serialises; this package holds no runtime code and
// must never grow a second, in-memory notion of a lane.
//
// # Tables
//
// Jobs of an ordered route are inserted with lane = true and state
// 'waiting'. A row in lanes (route, key) holds the lane's policy (none,
// newer, strict), on_dead, gap settings, last_version (the last applied
// version: a job not newer is stale), passed_version (strict lanes: the
// last version passed without being applied — a dead, discarded or
// parked job's — so that the version a strict lane waits for next follows
// the greater of the two, while the job it passed can still run,
// re-driven or late) and head_job_id: the lane's one job that is queued,
// running, retrying — or dead and blocking. A lane without a head is
// idle.
//
// # Promotion, and why the claim query never looks at lanes
//
// lane_promote(route, key) makes the lowest (version, offset) waiting job
// of an idle lane its head by setting it 'queued'. Stale versions met on
// the way become 'skipped' (never delivered); a strict lane facing a
// version gap records gap_since and holds until gap_timeout, then parks
// the job (DLQ reason gap) or proceeds. Because at most one job per lane
// is ever runnable, the claim query is the same partial-index SKIP LOCKED
// query as for unordered jobs: it scans no lanes and no waiting jobs, so a
// lane with thousands of queued jobs costs a claim nothing, and a hot key
// can never hold more than one worker.
//
// Promotion happens exactly where a lane changes:
//   - in the ingest transaction, for every lane that received jobs and has
//     no head;
//   - in the transaction that ends a head, by lanes_advance: the one
//     definition of what a head's end does to its lane (a table of every
//     case heads it). It clears the head (recording the version as
//     applied when it succeeded; strict lanes record any other ended
//     head's version as passed), or marks the lane blocked when the head
//     died under on_dead: block, and promotes the next job of a freed
//     lane. The
//     completer, which ends heads by the batch, calls it once per batch
//     in the same round trip as the outcomes (it reads the heads' states
//     only once it holds their lanes, so a job whose outcome was stale
//     changes nothing). A head that succeeded there has left jobs for
//     job_history in the same transaction; the completer passes its
//     route, key and version, and the lane advances from them. Every
//     other path — rescue of an expired lease,
//     cancel, expiry, Applier.Apply, re-drive — reaches it through the
//     AFTER UPDATE trigger jobs_lane_advance, so no code path can forget
//     it, and DLQ discard calls it directly. The trigger keeps one
//     switch, switchyard.lanes_batched, set only by the completer for its
//     own transaction: without it the trigger would run lanes_advance a
//     second time, row by row, for every head the batch ends. The two
//     paths are one function, and TestLanePathsAgree (internal/pgstore)
//     holds them equal for every way a head ends under every policy. In
//     the completer's batch the pool that ran a head may take the lane's
//     next job at once (a handoff, migration 0007): promotion claims it
//     with the same SET list as JobClaim (pgstore.claimSet), and the job goes back to that
//     pool with the outcome's result. It skips the 'queued' row version
//     and the claim; dispatch bounds how long a lane keeps a pool this way;
//   - by the gap sweeper (dispatch's rescuer) for strict lanes whose gap
//     timed out;
//   - on DLQ re-drive (a blocked head runs again in place: lanes_advance
//     unblocks a lane whose head is no longer dead; another dead job
//     rejoins its lane's order as waiting) and discard (a blocked lane's
//     head leaves it, its version not applied, and the lane moves on).
//
// # Why it is correct under concurrency
//
// Every promotion runs with the lane's row locked (SELECT … FOR UPDATE in
// lane_promote; ingest locks its lanes first with INSERT … ON CONFLICT DO
// UPDATE in (route, key) order, so two ingest batches sharing lanes
// cannot deadlock). Under that lock, head_job_id is read and set, so two
// transactions can never both promote in one lane: the second waits for
// the first to commit, then sees the new head and does nothing. A head
// that ends commits its end and the next promotion together, so a crash
// between them cannot leave a lane with two heads or with none while jobs
// wait. Lock order is always "job row, then lane row" for a head's end,
// and "lane row, then waiting job rows" for promotion; a head is never a
// waiting row, so the two orders never meet on one pair of rows. The
// trigger reads the lane without a lock first and returns at once for a
// job that is not the head, which keeps cancelling a waiting job from
// ever waiting on a lane lock.
//
// Two processes may still both believe they run a head after a lease
// expiry; that is I4's business: the fencing token rejects the stale
// holder's completion, so the lane advances exactly once.
//
// # Pruning idle lanes
//
// A lane row would otherwise outlive its key's last job forever: one row
// for every order id an ordered route has ever seen. The rescuer deletes,
// a page of the table at a time (pgstore.LanePrune), lanes that hold
// nothing: no head, not blocked, no strict gap, no waiting job, and no
// version (policy none, or none applied yet). A versioned lane (newer,
// strict) is kept for its last applied version, against which a late
// record is still judged stale: for good, unless retention.versions is
// set. Then the prune stamps an idle versioned lane with the time and the
// version it found (lanes.idle_since, idle_version: written by the prune
// alone, so that advancing a lane pays nothing for it) and deletes it once
// it is found idle with the same version that much later; a version
// applied meanwhile differs from the stamp, and the lane is stamped again.
// The prune locks the idle lanes of its page first (SKIP LOCKED:
// a lane some transaction holds is busy), then looks for their waiting
// jobs in a statement of its own, whose snapshot follows the locks: a job
// committed by then keeps its lane. Every path that adds a job to a lane
// either holds the lane's lock before it commits (lanes_upsert, in ingest
// and enqueue: it waits for the prune's lock, finds the row gone and
// inserts it again) or calls lane_promote after putting the job back (a
// re-run, a re-drive), which makes a missing lane again with its route's
// published settings and then promotes as always. So a lane is never
// missing under a job that waits in it (TestPruningBesideIngestLosesNoJob
// races the prune against ingest, claims, completions and re-runs).
// An idle lane whose jobs wait is promoted by the prune instead: the
// state lanes_advance leaves when the job it was promoting is cancelled
// at that moment, which the next ingest into the lane would mend, but a
// key may never get another record.
package lanes
