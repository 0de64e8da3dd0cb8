-- 0001: jobs, DLQ entries and consumed offsets.
-- Every object lives in the configured schema (search_path is set by the
-- migrator); nothing here names a schema.

CREATE SEQUENCE job_token_seq;

CREATE TABLE jobs (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    route            text        NOT NULL,
    kind             text        NOT NULL,
    queue            text        NOT NULL,
    -- waiting | queued | running | retrying | succeeded | dead | cancelled | skipped | expired
    state            text        NOT NULL,
    key              text        NOT NULL DEFAULT '',
    version          bigint,
    dedupe_key       text        NOT NULL,
    payload          bytea       NOT NULL,
    header_keys      text[]      NOT NULL DEFAULT '{}',
    header_values    bytea[]     NOT NULL DEFAULT '{}',
    attempts         integer     NOT NULL DEFAULT 0,
    max_attempts     integer     NOT NULL,
    -- fencing token of the current (or last) lease; NULL before the first claim
    token            bigint,
    lease_expires_at timestamptz,
    last_error       text,
    errors           jsonb       NOT NULL DEFAULT '[]',
    created_at       timestamptz NOT NULL DEFAULT now(),
    scheduled_at     timestamptz NOT NULL DEFAULT now(),
    deadline         timestamptz,
    started_at       timestamptz,
    finished_at      timestamptz,
    src_topic        text,
    src_partition    integer,
    src_offset       bigint,
    CONSTRAINT jobs_state_check CHECK (state IN ('waiting','queued','running','retrying',
        'succeeded','dead','cancelled','skipped','expired'))
);

-- I2: one job per (route, dedupe key), across redelivery, rebalance and replay.
CREATE UNIQUE INDEX jobs_dedupe_idx ON jobs (route, dedupe_key);

-- The claim path: only runnable rows are in this index, so finished
-- history never makes a claim slower.
CREATE INDEX jobs_runnable_idx ON jobs (queue, scheduled_at, id)
    WHERE state IN ('queued', 'retrying');

-- The rescuer's path: running rows by lease expiry.
CREATE INDEX jobs_running_idx ON jobs (lease_expires_at)
    WHERE state = 'running';

-- Admin listing by state/queue/key with keyset pagination on id.
CREATE INDEX jobs_state_id_idx ON jobs (state, id);
CREATE INDEX jobs_key_idx ON jobs (key, id) WHERE key <> '';

CREATE TABLE dlq_entries (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    -- decode | missing_field | too_large | permanent | max_attempts | gap
    reason        text        NOT NULL,
    route         text        NOT NULL,
    queue         text        NOT NULL,
    job_id        bigint      REFERENCES jobs (id) ON DELETE SET NULL,
    src_topic     text,
    src_partition integer,
    src_offset    bigint,
    attempts      integer     NOT NULL DEFAULT 0,
    last_error    text        NOT NULL DEFAULT '',
    errors        jsonb       NOT NULL DEFAULT '[]',
    payload       bytea       NOT NULL,
    header_keys   text[]      NOT NULL DEFAULT '{}',
    header_values bytea[]     NOT NULL DEFAULT '{}',
    created_at    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX dlq_entries_queue_idx ON dlq_entries (queue, id);
CREATE UNIQUE INDEX dlq_entries_job_idx ON dlq_entries (job_id) WHERE job_id IS NOT NULL;
-- A poison record is parked once, however often it is redelivered.
CREATE UNIQUE INDEX dlq_entries_source_idx ON dlq_entries (src_topic, src_partition, src_offset)
    WHERE job_id IS NULL;

-- I1: the consumed position per partition, advanced in the same
-- transaction as the rows it covers. Postgres, not Kafka, is the truth.
CREATE TABLE kafka_offsets (
    group_id    text    NOT NULL,
    topic       text    NOT NULL,
    partition   integer NOT NULL,
    next_offset bigint  NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (group_id, topic, partition)
);
