// Package flow decides what this process holds back, and why: queues an
// operator paused (no claims), routes an operator paused (no fetching),
// and routes whose queue is over its max_depth (backpressure: no
// fetching). SPEC §2 I10: holding back loses nothing — records wait in
// Kafka, where they are already durable, and jobs wait in their queue.
//
// # Where each decision lives
//
//   - A pause is a row of the paused table (migration 0010), written by
//     the admin API or the CLI. The claim statement itself refuses to
//     claim from a paused queue (pgstore.JobClaim), so a claim that starts
//     after the pause commits takes nothing, in every process at once.
//     The Watcher re-reads the table every Interval (500 ms) so that
//     pools stop asking, handed-off lane jobs stop, prefetched jobs wait,
//     and paused routes stop fetching: within a second everywhere, which
//     is SPEC §6's promise for what the claim does not cover.
//   - Backpressure is not stored: it follows from the queue's depth
//     (pgstore.QueueDepth, waiting + queued + retrying, counted no further
//     than max_depth), which the Watcher reads every Interval and which
//     the consumer raises between reads by what each batch it stored
//     added (Added). A route holds at the first batch that takes its
//     queue to max_depth — so the queue exceeds max_depth by at most one
//     poll per ingesting process — and resumes when a read finds the
//     queue below 90 % of it (hysteresis, so that a queue at its limit
//     does not pause and resume on every batch).
//
// # Why it cannot lose or reorder records
//
// Holding a route pauses the consumer's fetching of its topic
// (kgo.Client.PauseFetchTopics); records already fetched and not yet
// handed out are dropped by the client and fetched again on resume, from
// the position after the last record ingest stored. Nothing is skipped
// (the stored offsets, committed with the jobs, are the only position),
// and nothing is reordered (a partition is read in order, before and
// after). A process that dies while a route is held restarts from the
// stored offsets, and reads the pauses before it fetches anything.
//
// # A route's max_running, fleet-wide (SPEC §2 I9)
//
// The cap lives in the claim, not in this package: a route with
// max_running has its jobs left out of its queue's claim and claimed by
// pgstore's claimCapped instead, in a transaction of two statements:
//
//  1. pg_advisory_xact_lock on the route (schema-qualified): claims of
//     the route, from any process, run one at a time, until commit.
//  2. Count the route's running jobs and claim at most cap − count.
//     Under READ COMMITTED this statement's snapshot is taken after the
//     lock was granted, so every earlier claim of the route has
//     committed and is counted; no later one can commit before this one.
//
// Why the count cannot be exceeded: a job of the route becomes running
// only through step 2 (the queue's claim excludes the route, and a pool
// never asks for a lane handoff of it), and step 2 runs with the lock
// held, so two of them never count the same state; a job stops counting
// only when it leaves running (completed, rescued, released, cancelled),
// which can only lower the count. Prefetched jobs are running rows and
// count, so the cap is on claimed jobs, which bounds started ones. A
// process killed with jobs running keeps their rows running, and
// counted, until the rescuer requeues them once their leases expire:
// only then do its slots come back, and never twice (the fencing token
// of I4 rejects the dead holder's outcomes).
//
// What it costs: the route's claims are serialized (a claim holds the
// lock for one short transaction), and each counts the route's running
// rows through the partial index of running rows; routes without a cap
// pay one `route <> ALL('{}')` per claim.
package flow
