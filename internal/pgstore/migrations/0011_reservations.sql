-- 0011: jobs each process holds claimed but not started (SPEC §3's
-- `reserved`): prefetched jobs and handed-off lane jobs waiting for a
-- worker. They are `running` in jobs (leased, heartbeated); each process
-- publishes how many of them it holds per queue, about once a second, so
-- that GET /v1/queues and switchyard_queue_jobs can tell them apart from
-- the jobs whose handlers run. A row not refreshed for 15 s belongs to a
-- process that is gone and is not counted.
CREATE TABLE reservations (
    process    text        NOT NULL,
    queue      text        NOT NULL,
    reserved   integer     NOT NULL CHECK (reserved >= 0),
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (process, queue)
);
