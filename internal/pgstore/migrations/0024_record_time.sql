-- 0024: a Kafka job's record timestamp, so that the end-to-end latency
-- (switchyard_job_latency_seconds) counts from when the record was
-- produced, Kafka lag included — the number the client experiences.
-- NULL for a job of the API or a schedule, whose created_at is when it
-- was asked for; nullable, so adding it rewrites nothing.
ALTER TABLE jobs ADD COLUMN record_at timestamptz;
