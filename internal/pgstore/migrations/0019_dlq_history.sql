-- 0019: a DLQ entry outlives its re-drive. Before, re-driving deleted the
-- entry, so its id stopped answering and a record that failed again had
-- no past. Now the entry stays, marked with when, by whom, and the job
-- the re-drive made or revived; lists show parked entries unless asked
-- for re-driven ones, and the entry goes when its job is pruned.
ALTER TABLE dlq_entries
    ADD COLUMN redriven_at    timestamptz,
    ADD COLUMN redriven_by    text,
    ADD COLUMN redrive_job_id bigint;
-- A re-driven job that dies again gets a new entry beside the old one.
DROP INDEX dlq_entries_job_idx;
CREATE UNIQUE INDEX dlq_entries_job_idx ON dlq_entries (job_id) WHERE job_id IS NOT NULL AND redriven_at IS NULL;
DROP INDEX dlq_entries_source_idx;
CREATE UNIQUE INDEX dlq_entries_source_idx ON dlq_entries (route, src_topic, src_partition, src_offset)
    WHERE job_id IS NULL AND redriven_at IS NULL;
-- Re-driven entries by their job, for pruning them with it.
CREATE INDEX dlq_entries_redrive_job_idx ON dlq_entries (redrive_job_id) WHERE redrive_job_id IS NOT NULL;
