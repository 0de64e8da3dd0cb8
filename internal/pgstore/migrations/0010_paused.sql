-- 0010: queues and routes an operator paused (I10).
--
-- A row is a pause; deleting it resumes. Every process reads the table
-- (internal/flow) and the claim checks it, so a pause holds fleet-wide
-- and across restarts. Backpressure is not recorded here: it follows
-- from the queue's depth, which every process can read.
CREATE TABLE paused (
    kind      text        NOT NULL CHECK (kind IN ('queue', 'route')),
    name      text        NOT NULL,
    paused_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (kind, name)
);
