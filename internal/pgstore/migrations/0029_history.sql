-- 0029: succeeded jobs leave the jobs table, a completion batch at a time.
--
-- Why: a completion that updated its jobs in place wrote each row again
-- (payload and all) and an entry in two indexes, and the finished rows
-- stayed in the hot table, its indexes and its vacuums until retention
-- removed them. A burn-down of no-op jobs was bound by those writes
-- (docs/performance.md, "Finished jobs in batches"). Now a completion
-- deletes the jobs that succeeded outside a lane, which writes no row
-- version and no index entry, and keeps them as ONE row of job_history
-- per statement: an lz4-compressed array of what the status API, the
-- listings and the dedupe lookups read of them (job_view). Everything
-- else stays in jobs: running and waiting jobs, dead jobs (the DLQ and
-- re-drive work on their rows), every job of a lane (lanes_advance reads
-- an ended head's row), and jobs that ended any other way.
--
-- job_view is a type of its own, not the jobs row type, so that a later
-- migration may still change jobs: a table column of a table's row type
-- forbids most ALTER TABLEs of it. It holds every column of jobs but the
-- lease, which means nothing once a job has ended. A column added to jobs
-- later is added here too (ALTER TYPE job_view ADD ATTRIBUTE: the jobs
-- already kept read it as NULL) and to job_as_view and
-- job_history_restore in functions.sql.
CREATE TYPE job_view AS (
    id            bigint,
    origin        text,
    route         text,
    kind          text,
    queue         text,
    state         text,
    key           text,
    version       bigint,
    dedupe_key    text,
    grp           text,
    lane          boolean,
    payload       bytea,
    header_keys   text[],
    header_values bytea[],
    attempts      integer,
    max_attempts  integer,
    token         bigint,
    last_error    text,
    errors        jsonb,
    created_at    timestamptz,
    scheduled_at  timestamptz,
    deadline      timestamptz,
    started_at    timestamptz,
    finished_at   timestamptz,
    record_at     timestamptz,
    src_topic     text,
    src_partition integer,
    src_offset    bigint,
    result        bytea,
    result_type   text,
    attempt_span  text,
    checkpoint    bytea
);

-- One row per completion statement. ids spans the batch's ids (a
-- lookup by id finds the few batches whose span holds it, then reads
-- their rows); finished_at is when the batch committed, which retention
-- drops whole batches by; n counts its jobs, and queues and routes name
-- theirs, so that a count or a listing of one queue or route skips the
-- batches it is not in without decompressing them (a superset once
-- job_history_restore has taken jobs out).
CREATE TABLE job_history (
    ids         int8range   NOT NULL,
    finished_at timestamptz NOT NULL,
    n           integer     NOT NULL,
    queues      text[]      NOT NULL,
    routes      text[]      NOT NULL,
    jobs        job_view[]  NOT NULL
);
CREATE INDEX job_history_ids_idx ON job_history USING gist (ids);
CREATE INDEX job_history_finished_idx ON job_history (finished_at);
CREATE INDEX job_history_last_idx ON job_history (upper(ids));

-- lz4 where the server was built with it (Debian's and the official
-- images are): pglz cost the completion most of what the batching saved.
DO $$
BEGIN
    ALTER TABLE job_history ALTER COLUMN jobs SET COMPRESSION lz4;
EXCEPTION WHEN feature_not_supported THEN
    RAISE NOTICE 'job_history: lz4 is not available, its rows are compressed with pglz';
END $$;

-- A DLQ entry's job may now live in job_history: the reference can no
-- longer be a foreign key. JobPrune clears job_id where it deletes the
-- job, as the key's ON DELETE SET NULL did.
ALTER TABLE dlq_entries DROP CONSTRAINT IF EXISTS dlq_entries_job_id_fkey;
