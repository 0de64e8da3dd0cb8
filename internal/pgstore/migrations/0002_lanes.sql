-- 0002: per-key lanes for ordered routes (I3). See lanes/doc.go for the
-- design and why it is correct under concurrency.

ALTER TABLE jobs ADD COLUMN lane boolean NOT NULL DEFAULT false;

-- The promotion path: a lane's waiting jobs in (version, offset) order.
CREATE INDEX jobs_lane_waiting_idx ON jobs (route, key, version NULLS FIRST, src_offset, id)
    WHERE state = 'waiting';

CREATE TABLE lanes (
    route        text        NOT NULL,
    key          text        NOT NULL,
    -- none (no versions) | newer | strict
    policy       text        NOT NULL DEFAULT 'none',
    -- continue | block
    on_dead      text        NOT NULL DEFAULT 'continue',
    gap_timeout  interval    NOT NULL DEFAULT '5 minutes',
    -- proceed | park
    gap_policy   text        NOT NULL DEFAULT 'park',
    -- The one job of this lane that is queued, running, retrying, or dead
    -- and blocking. NULL: nothing in flight, the next waiting job may be
    -- promoted.
    head_job_id  bigint,
    last_version bigint,
    blocked      boolean     NOT NULL DEFAULT false,
    -- Set while a strict lane holds for a missing version.
    gap_since    timestamptz,
    PRIMARY KEY (route, key)
) WITH (fillfactor = 70); -- room for HOT updates: a lane's head changes with every job
CREATE INDEX lanes_gap_idx ON lanes (gap_since) WHERE gap_since IS NOT NULL;
CREATE INDEX lanes_blocked_idx ON lanes (route) WHERE blocked;

-- The functions and the trigger that keep lanes (lane_promote,
-- lanes_advance, lane_job_changed, jobs_lane_advance) live in
-- functions.sql, which migrate applies after the numbered migrations.
