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
package flow
