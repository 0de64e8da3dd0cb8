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
//     than max_depth), which the Watcher reads every Interval and again
//     after each batch ingest stores for the queue (Added). A route holds
//     at the first batch that takes its queue to max_depth, and resumes
//     when a read finds the queue below 90 % of it (hysteresis, so that
//     a queue at its limit does not pause and resume on every batch).
//     Why the read after each batch: an estimate of the depth from this
//     process's own batches misses the other processes', and with two
//     ingesting processes the queue went 60 % past its limit
//     (TestBackpressureHoldsIngestAtMaxDepth). With it, a process adds at
//     most one batch after a read that found the queue under its limit,
//     so the queue exceeds max_depth by at most one poll per ingesting
//     process. A read older than the newest known depth is ignored, so a
//     slow periodic read cannot resume a route that a batch just held.
//
// # Why it cannot lose or reorder records
//
// Holding a route pauses the consumer's fetching of its topic
// (kgo.Client.PauseFetchTopics), and so of every route of that topic:
// they share its stored offsets, and moving them on for one route would
// skip the records the held one has not taken. Records already fetched
// and not yet handed out are dropped by the client and fetched again on
// resume, from the position after the last record ingest stored. Nothing is skipped
// (the stored offsets, committed with the jobs, are the only position),
// and nothing is reordered (a partition is read in order, before and
// after). A process that dies while a route is held restarts from the
// stored offsets, and reads the pauses before it fetches anything.
//
// # Fleet-wide limits (SPEC §2 I9): max_running, group, rate_limit
//
// The limits live in the claim, not in this package. A route with any of
// them is "limited": ingest gives each of its jobs a group value (the
// record's group field or header, or pgstore.GroupAll, one group, for a
// route without `group`) in the jobs.grp column; the queue's claim leaves
// the route out, and pgstore's claimLimited claims its jobs instead, in
// one implicit transaction of two statements sent in one round trip:
//
//  1. pg_advisory_xact_lock on the route (schema-qualified): claims of
//     the route, from any process, run one at a time, until commit.
//  2. The claim. Under READ COMMITTED its snapshot is taken after the
//     lock was granted, so every earlier claim of the route has committed
//     and is seen; no later one can commit before this one. It computes
//     the route's room — max_running minus the route's counted jobs, and
//     the starts the rate allows now — then walks the route's groups (one
//     index descent per group, from the group after the last one this
//     process claimed from, so that its claims take turns), takes from
//     each group at most its max_running minus its counted jobs, stops at
//     the room, and moves the rate's state on by what it took.
//
// What counts: a job of the route in state running, except the claiming
// process's own attempts whose handlers have returned (their outcomes are
// on the way to the completer; pgstore.JobClaimParams.Ended, named by
// their fencing tokens). Prefetched jobs count, so the caps bound claimed
// work, which bounds started work.
//
// Why a cap (route or group) cannot be exceeded. A job of a limited
// route starts only through step 2: the queue's claim excludes the route,
// and a pool never asks for a lane handoff of it. Step 2 runs with the
// route's lock held and a snapshot newer than every earlier claim's
// commit, so two claims never count the same state, and each leaves the
// count at most at the cap. Between claims the count only falls: a job
// leaves running (completed, rescued, released, cancelled), or its
// handler returns in the process that holds it. The one exclusion is
// safe because it is the claimer's own knowledge of its own attempts: the
// handler of an excluded attempt has returned, so it calls nothing; and
// the exclusion is by token, so if that attempt's lease was lost and
// another process claimed the job again (a new token), the new attempt
// counts. Other processes' returned attempts are counted until written:
// a process may under-use the cap, never exceed it. This is why the
// table can briefly show more running rows than max_running while at
// most max_running handlers run: the promise is about handlers, which is
// what a dependency sees.
//
// Crashes. A process killed with jobs running leaves their rows running,
// and counted, until the rescuer requeues them once their leases expire:
// only then do its slots come back, and never twice (the fencing token of
// I4 rejects the dead holder's outcomes). A route that becomes limited
// has its unfinished jobs put in GroupAll by every process that claims,
// at start (pgstore.FlowGroupsAssign), so that none is left unclaimable.
// Limits hold when every process runs the same routes' limits; a process
// with an older config claims the route's jobs unlimited.
//
// Rate limits are GCRA: one row per route (flow_rates) holds the
// theoretical arrival time tat of the next start, interval = per / limit
// and tolerance = burst × interval. A claim at now may make k starts
// while greatest(tat, now) + (k − 1)·interval − tolerance ≤ now, and sets
// tat = greatest(tat, now) + k·interval. Starts are then spaced one
// interval apart, with bursts of burst + 1 after an idle spell, so any
// window of per holds at most limit + burst starts, one more at a
// window's edge. Every claim of the route reads and writes the row under
// the route's lock, so the arithmetic is exact fleet-wide, on the
// database's clock. A start is an attempt's claim: retries count. Since
// an idle spell earns back at most burst + 1 starts, a rate whose
// interval is shorter than a claim's round trip (a millisecond or two)
// is under-used without a burst: above ~500 starts/s, set burst to the
// starts of a few milliseconds.
//
// Throttling is counted (switchyard_flow_throttled_total{route,limit})
// when a limited route's claim came back short while the route still had
// runnable jobs, by the limit that held it: rate, else max_running, else
// group. The pool then claims again after limitedRetry (50 ms), or one
// rate interval if that is sooner.
//
// What it costs: a limited route's claims are serialized (the lock is
// held for one statement and its commit), and its claim walks groups
// rather than one index range; routes without limits pay one
// `route <> ALL('{}')` per claim. Measured with `switchyard bench --only
// work,capped,grouped`: see docs/performance.md.
package flow
