-- 0020: each process's counts of the jobs that arrived in and finished
-- from each queue since it started (metrics.QueueFlow), published every
-- few seconds, so that GET /v1/queues can sum them fleet-wide and the
-- dashboard can tell arrival and completion rates from two readings. A
-- stopped process's row keeps counting in the sum (its counts do not
-- vanish, so the sum never falls) until it is a day old.
CREATE TABLE queue_flow (
    process    text        NOT NULL,
    queue      text        NOT NULL,
    arrived    bigint      NOT NULL,
    finished   bigint      NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (process, queue)
);
