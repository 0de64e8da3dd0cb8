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
// The limits live in the claim and where a job starts, not in this
// package. A route with any of them is "limited": ingest gives each of
// its jobs a group value (the record's group field or header, or
// pgstore.GroupAll, one group, for a route without `group`) in the
// jobs.grp column, and the queue's claim leaves the route out
// (pgstore.JobClaim). A route-wide max_running is held by slots that
// each process leases (internal/dispatch's slots, pgstore.FlowSlotsLease);
// a group's max_running and a rate limit are held by a counted claim,
// serialized per route (pgstore's claimLimited). A route with both kinds
// has both.
//
// # max_running: slots leased by each process
//
// A row of flow_slots (migration 0023) is one process's share of one
// route's max_running, with an expiry. A process starts a handler of the
// route only on a free slot of its share (slots.take), and its return
// gives the slot back (slots.put), in memory. The route's jobs are
// claimed like any queue's, with no lock and nothing counted, at most the
// share's free slots plus the prefetch the pool may hold under it
// (JobClaimParams.Slots): prefetched jobs wait in ready for a slot, and
// do not take one.
//
// Why the cap cannot be exceeded. Two facts, each kept by one mechanism:
//
//  1. The live rows of a route never add up past max_running. A lease
//     holds the route's advisory lock (schema-qualified) and, under READ
//     COMMITTED, takes its snapshot after it was granted, so it sees every
//     other holder's committed row; it sets its own row to at most
//     max_running minus the others' live rows, or to what its handlers
//     use if that is more. What they use never exceeds the holder's live
//     row (fact 2), so by induction over leases the sum stays at most
//     max_running; an expiry only takes a row out of the sum. (A process
//     frozen past its share, its handlers' leases long expired, writes a
//     row of what they still use when it wakes: that leaves the others
//     less room, never more, and its handlers are cancelled; see below.)
//  2. A process never runs more handlers of the route on slots than its
//     live row holds. take admits a handler while fewer than the share
//     run, where the share is what the last lease returned (at most the
//     row); while a lease is in flight, no more than the in-use count it
//     sent, which the new row keeps whatever share it computes; after a
//     lease that failed (and may have committed), no more than that count
//     either. A handler starts only if the share holds longer than its job
//     lease, and a heartbeat never extends the lease of a handler past its
//     share (pool.covered: left out, the lease is lost and the handler
//     cancelled). The share is timed on the process's clock from before
//     the lease was asked for, so it ends before the row expires on the
//     database's clock, whatever the clocks say; and the database caps
//     every job lease a heartbeat or a restart sets at the holder's row's
//     expiry (pgstore's slotLeaseCap), so a statement that reaches it late
//     cannot extend one past the row either.
//
// So at any instant the handlers running on slots, fleet-wide, are at
// most the live rows' sum, at most max_running. A handler that outlives
// its job lease (a process frozen past it) is outside the promise until
// its heartbeat cancels it, as under any lease (I4).
//
// Crashes. A process killed with handlers running takes them with it;
// its row stays live, and counted, until it expires — a lease and a half
// after its last renewal (shares are renewed every third of the shortest
// job lease; slotsTTL), after the process's job leases — and only then do
// its slots come back. Never twice: a process's holder name is drawn at
// each start, so a restarted process leases a row of its own, and the
// dead one's just expires. The jobs themselves come back through the
// rescuer as every job does; their next attempts start on whoever's
// slots.
//
// Sharing. A process asks for all of max_running while the route may have
// work for it (its last claim of the route got all it asked for, or a
// start found no slot), else for what it uses. While others ask too, a
// share is at most an even split of max_running (unless what the others
// want leaves it more), so a process with more than its split starts no
// more until its handlers have ended below it, and the next lease gives
// the rest to the others. The split is made only as processes lease, so
// while a route may have work in a process (it claimed all it could, or
// a start found no slot), the process leases every second rather than
// every third of a job lease: one that took all of max_running before
// another asked gives the other its part within a second or so (once
// its handlers end below its split), and one that asked while another
// held all asks again within a second. A process under-uses the cap for
// about that long after its work moved elsewhere, never exceeds it. A
// stopping process releases its rows once its last handler has returned.
//
// # A group's max_running and rate_limit: the counted claim
//
// A route with a group or a rate limit is claimed by claimLimited, in
// one implicit transaction of two statements sent in one round trip:
//
//  1. pg_advisory_xact_lock on the route: counted claims of the route,
//     from any process, run one at a time, until commit.
//  2. The claim. Its snapshot is taken after the lock was granted, so
//     every earlier claim of the route has committed and is seen; no later
//     one can commit before this one. It computes the starts the rate
//     allows now, takes from each group at most its max_running minus its
//     counted jobs, stops at the rate's room, and moves the rate's state on
//     by what it took. It first takes the route's next jobs in claim order
//     (claimWindowSQL: one index range, each job kept if its group has
//     room: cheap where groups are many and mixed), and only if that comes
//     back short walks the groups themselves (one index descent per group,
//     from the group after the last this process walked to, so that its
//     claims take turns): a flood in one group fills the window with jobs
//     that group has no room for, and the walk then serves every other
//     group with room.
//
// What a group counts: a job of the route in state running, except the
// claiming process's own attempts whose handlers have returned (their
// outcomes are on the way to the completer; pgstore.JobClaimParams.Ended,
// named by their fencing tokens). Prefetched jobs count, so a group's cap
// bounds claimed work, which bounds started work.
//
// Why a group's cap cannot be exceeded. A job of a grouped route is
// claimed only through step 2: the queue's claim excludes the route, and
// a pool never asks for a lane handoff of it. Step 2 runs with the
// route's lock held and a snapshot newer than every earlier claim's
// commit, so two claims never count the same state, and each leaves every
// group's count at most at its cap. Between claims a count only falls: a
// job leaves running (completed, rescued, released, cancelled), or its
// handler returns in the process that holds it. The one exclusion is
// safe because it is the claimer's own knowledge of its own attempts: the
// handler of an excluded attempt has returned, so it calls nothing; and
// the exclusion is by token, so if that attempt's lease was lost and
// another process claimed the job again (a new token), the new attempt
// counts. Other processes' returned attempts are counted until written:
// a process may under-use a cap, never exceed it. This is why the table
// can briefly show more running rows of a group than its max_running
// while at most that many handlers run: the promise is about handlers,
// which is what a dependency sees. A crashed holder's jobs stay running,
// and counted, until the rescuer requeues them once their leases expire;
// the fencing token of I4 rejects the dead holder's outcomes.
//
// A route that becomes limited has its unfinished jobs put in GroupAll by
// every process that claims, at start (pgstore.FlowGroupsAssign), so that
// none is left unclaimable. Limits hold when every process runs the same
// routes' limits; a process with an older config claims the route's jobs
// unlimited.
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
// database's clock. A start is an attempt's claim: retries count, and so
// does a prefetched job of a route that also has a max_running, which
// may start later, on a slot: the rate bounds claims, which bound starts.
// Since an idle spell earns back at most burst + 1 starts, a rate whose
// interval is shorter than a claim's round trip (a millisecond or two)
// is under-used without a burst: above ~500 starts/s, set burst to the
// starts of a few milliseconds.
//
// Throttling is counted (switchyard_flow_throttled_total{route,limit}):
// by the counted claim when it came back short while the route still had
// runnable jobs, by the limit that held it (rate, else group); and by the
// pool, limit max_running, when a claim had no room in the process's
// share while the route had work for it. The pool then claims again
// after limitedRetry (50 ms), or one rate interval if that is sooner, or
// when a slot frees or a lease gives it more.
//
// What it costs. A route capped by max_running alone is claimed like an
// unlimited one, with no lock and nothing counted; each process adds one
// lease statement every third of its shortest job lease, and one when it
// wants more slots (at most every 10 ms). Measured with the counted claim
// the cap used before (counting the route's running jobs under its lock
// at every claim, so that a slot stayed taken from a claim until the
// claimer's next claim learned its handler had returned: 64 jobs per
// claim round trip, one round trip at a time), bench capped ran at
// 0.50–0.68 of work; with slots, see docs/performance.md. A grouped or
// rate-limited route's counted claims are serialized (the lock is held
// for one statement and its commit), and a grouped claim reads a window
// of the route's next jobs (claimWindow per job asked for) rather than
// one index range; routes without limits pay one `route <> ALL('{}')` per
// claim. Since a second claim of the route would only wait for the lock,
// a pool of a queue with a counted route keeps one claim in flight, not
// two, and that one claims every worker freed while the last ran: fewer,
// larger claims, each paying the lock, the count of running jobs and the
// commit once (dispatch's countedClaims).
//
// The claim commits synchronously, with the WAL flushed under the lock,
// as every claim does whatever the session's synchronous_commit
// (pgstore's tokenSQL). Committed with synchronous_commit off it would
// release the lock sooner, and a claim that counted it would still commit
// after it in the WAL; but a crash of Postgres could then lose a claim
// whose handlers had started, and hand its tokens out again (I4; the
// sequence is rolled back with it). TestHandedOutTokensSurviveAPostgresCrash
// fails that way. Waiting for the flush outside the lock before handing
// the jobs out keeps I4, and was measured: it gained nothing over the
// synchronous commit.
package flow
