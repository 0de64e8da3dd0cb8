-- 0028: the parked DLQ entries by queue and reason, in an index of their own.
--
-- Why: QueueStats counts the parked entries per queue and reason, and
-- every process's sampler calls it every 5 s. With no index that holds
-- only parked entries, each call read the whole DLQ heap, payloads and
-- all: 106 ms for 200,000 entries (71 MB). An index-only scan of this
-- index takes 30 ms (docs/performance.md, "Pruning and counting beside a large DLQ").
-- Entries are parked far more often than they are re-driven, and a
-- re-drive takes its entry out of the index.
CREATE INDEX dlq_entries_parked_idx ON dlq_entries (queue, reason) WHERE redriven_at IS NULL;
