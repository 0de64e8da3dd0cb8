// Package ingest turns Kafka records into job rows (I1, I2, I6).
//
// # One transaction per poll
//
// Each poll's records become, per partition, job rows (dedupe key: the
// route's field, else topic/partition/offset) and DLQ rows for poison
// (undecodable, missing key/version/dedupe field, over max_record_bytes),
// and every partition's next offset is stored — all in ONE Postgres
// transaction (pgstore.IngestCommit). Kafka's committed offset follows,
// asynchronously, only so that lag tools keep working: Postgres is the
// source of truth, and a lost Kafka commit loses nothing.
//
// # The fence
//
// A partition's stored offset advances only from the value this member
// last saw (UPDATE … WHERE next_offset = expected). After a rebalance, a
// member that still holds an old batch (a zombie) finds the offset moved,
// rolls everything back, and re-seeks to the stored position; it never
// relies on Kafka's generation. On assignment, the fetch position comes
// from Postgres (AdjustFetchOffsetsFn). A partition with no stored offset
// while Kafka has a committed one means the database was lost or
// replaced: the consumer stops with an error instead of silently
// skipping, unless the operator asked for --reset-offsets.
//
// # Rebalances
//
// BlockRebalanceOnPoll keeps a rebalance from revoking a partition between
// a poll and the end of its transaction, and the revoke callback waits for
// Kafka commits in flight, so no commit is ever sent for a partition this
// member no longer owns.
//
// This package never runs jobs and never writes SQL itself; it decodes
// records (Route.Decode, which always yields exactly one of a job or a
// poison entry) and hands batches to pgstore.
package ingest
