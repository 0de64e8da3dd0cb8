// Package dispatch runs jobs: it claims runnable jobs for each queue's
// worker pool, holds their leases with heartbeats, records outcomes, and
// rescues jobs whose worker vanished.
//
// # Design
//
// Every hot path is batched, because one transaction per job caps a
// Postgres queue at ~1.5–2k jobs/s on a small machine:
//
//   - Claim: a pool with n free workers claims up to n jobs in ONE
//     statement (pgstore.JobClaim: FOR UPDATE SKIP LOCKED over a partial
//     index of runnable rows). The same UPDATE counts the attempt (I5),
//     draws a fresh fencing token from a sequence (I4), and sets the lease
//     from the database clock. Under a backlog a pool keeps two claims in
//     flight and starts each where its last one ended (less 100 ms; from
//     the beginning at least every second and whenever a claim comes back
//     short): claimed rows leave dead entries at the front of the index
//     until vacuum, and a claim from the beginning walks all of them
//     (pgstore.ClaimPosition). Under a backlog a claim also asks for up
//     to the queue's prefetch of jobs beyond its idle workers, which wait
//     in ready as handed-off lane jobs do (leased, heartbeated, their
//     clock restarted after a long wait, the restarts of the jobs that
//     start meanwhile in one statement, released by Stop): with a
//     prefetch of a pool's worth, claims come in batches twice the size
//     and a freed worker starts its next job without a round trip
//     (measured: 29 → 60 jobs per claim statement, work_jobs_per_s
//     +20-45%); with seven pools' worth, a local queue of
//     graphile-worker's size, 154-159 jobs per claim and another +20 %
//     (docs/performance.md). The price is that a process killed with
//     jobs waiting in ready has spent an attempt of each, as it has of
//     every job it was running, and that a prefetched job waits behind a
//     slow one while another process's worker may be idle: prefetch
//     defaults to 0, for fast uniform queues to raise.
//   - Leases: a pool holds at most 4 × concurrency leases, running
//     handlers plus outcomes not yet written, and its prefetch on top
//     (MaxLeases; a route's max_running counts them all); a worker frees
//     when its handler returns.
//   - Heartbeat: every lease/3, one statement extends all leases a pool
//     holds, token-checked. A lease the statement did not extend is lost:
//     the handler's context is cancelled at once with workers.ErrLeaseLost
//     (an HTTP request in flight is aborted).
//   - Complete: a completer gathers outcomes for a few milliseconds and
//     writes them in one statement, conditional on the token and on the
//     row still running, so a stale holder changes nothing (I4). Dead jobs
//     get their DLQ entry in that same statement; ended lane heads advance
//     their lanes in the same round trip (lanes_advance). Up to four
//     batches are in flight; every batch locks its job rows in id order,
//     as heartbeats do, so they cannot deadlock.
//   - Lane handoff: when a lane job of the pool's own queue ends, the
//     pool asks for the lane's next job with the outcome, and the
//     completion transaction promotes it straight to running, leased to
//     this pool (pgstore.Outcome.Handoff). An ordered job then costs two
//     row versions, as an unordered one does, instead of three and a
//     claim (measured: WAL records per job fell from 27 to 18, ordered
//     throughput from ~0.6 to ~0.9 of unordered). A handed-off job starts
//     on a free worker, or waits first in line for the next one while
//     claims hold back (its lease is heartbeated; after a wait of over a
//     second its clock restarts when it starts, so the wait does not come
//     out of its max_runtime). A lane keeps a pool this way for at most a
//     second (laneHandoffWindow), then its next job queues behind the
//     others: a key with a steady stream must not keep a worker from the
//     other keys. A closing pool asks for none and releases any that
//     reach it. A job finished by its handler's own transaction
//     (Applier.Apply) never reaches the completer: its lane's next job
//     is queued by the trigger, as before.
//   - Flow limits (internal/flow/doc.go holds the argument): a route's
//     max_running is held by slots. The dispatcher leases this process's
//     share of each such route's slots (slots.go, pgstore.FlowSlotsLease),
//     renewed every third of the shortest lease; a handler of the route
//     starts only on a free slot of the share and gives it back when it
//     returns, a claim takes at most the free slots plus the prefetch that
//     may wait for them, and a heartbeat never extends a handler's lease
//     past its share. A group's max_running and a rate are held by the
//     counted claim, which is told the tokens of the pool's returned
//     attempts of grouped routes (pgstore.JobClaimParams.Ended).
//   - Rescue: expired leases (a killed or stalled process) go back to
//     retrying, or to dead once attempts are used up (I5). Any number of
//     processes may run it: it is SKIP LOCKED and batched. With tracing
//     on, it also ends a span for each lost attempt, whose process never
//     ended its own (lostSpans).
//
// A pool whose claim found its queue dry lends its idle workers to the
// batches its process's ingest stores (lend.go): the batch's
// transaction claims for them (pgstore.IngestClaim), with the same
// statement, lease and token as a claim, and they start at its commit.
// The workers it did not use come back as freed ones: a wake-up that came
// while they were lent is claimed for then.
//
// Wake-ups come from LISTEN/NOTIFY after ingest commits; polling every
// poll_interval stays the source of truth, so a lost notification only
// costs latency, and each time LISTEN is in place (at the start, after a
// reconnect) every pool claims once for what was sent before. A worker that frees claims again only where that can
// find something: under a backlog, behind a limit's hold, or once a
// lane job's outcome is settled (its lane's next job may be queued now,
// if no handoff took it); after a claim that
// found the queue dry it waits for a wake-up or the poll, or every job
// that arrived alone would cost a claim for each worker it freed. Cancels come the same way: the commit of an operator's
// cancel of a running job notifies its id, and the process holding an
// attempt of it cancels the attempt's context with workers.ErrCancelled
// at once. A lost one costs latency too: on reconnecting, the listener
// asks which held jobs were cancelled meanwhile, and the heartbeat finds
// any job that left running.
//
// # Shutdown (I7)
//
// Stop stops claiming, lets in-flight jobs finish for the grace period,
// then cancels the rest with workers.ErrShutdown and releases their leases
// (and those of handed-off jobs no worker took) back to queued (handing
// the attempt back: a deploy is not the job's fault), flushes the
// completer on a context that is not cancelled, gives back its shares of
// max_running once no handler runs (else they expire), and returns once
// every goroutine it started has ended.
//
// # Where things are
//
// dispatcher.go owns the pools, the rescuer and the wake-ups; lend.go
// the workers lent to ingest's claims; a pool
// (pool.go) gets what it needs of them at construction (poolEnv) and
// never reaches back. claim.go decides how many jobs a pool claims and
// when; lease.go keeps the book of the leases a pool holds, heartbeats
// and releases them; execute.go runs handlers and turns their returns
// into outcomes; handoff.go takes a lane's next job from the completer;
// completer.go writes outcomes in batches; slots.go leases and hands out
// the process's shares of max_running.
//
// Dispatch never decodes records and never touches Kafka.
package dispatch
