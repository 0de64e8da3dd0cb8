-- 0016: the deployment's routes as the SQL function enqueue() needs them
-- (SPEC §8): the settings a job of (queue, kind) takes. `switchyard
-- migrate` and every process at start publish their config's routes
-- (pgstore.RoutesPublish), so the table says what the last of them was
-- configured with.
CREATE TABLE routes (
    queue        text        NOT NULL,
    kind         text        NOT NULL,
    route        text        NOT NULL,
    max_attempts integer     NOT NULL,
    ttl          interval,                -- NULL: no deadline
    lane_policy  text,                    -- NULL: unordered; else none | newer | strict
    on_dead      text        NOT NULL,
    gap_timeout  interval    NOT NULL,
    gap_policy   text        NOT NULL,
    limited      boolean     NOT NULL,    -- max_running, group or rate_limit
    grouped      boolean     NOT NULL,    -- group: its value is read from the payload
    coalesce     boolean     NOT NULL,
    max_depth    integer     NOT NULL,    -- its queue's; 0: none
    published_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (queue, kind)
);
