-- 0023: a route's max_running as slots that processes lease (SPEC §2 I9;
-- see internal/flow/doc.go). A row is one process's share of one route's
-- slots: it starts that route's jobs only while fewer than its slots run,
-- and its share counts against the route's max_running until it expires,
-- which a live process keeps pushing ahead (pgstore.FlowSlotsLease). A
-- process that dies leaves its row to expire: its slots come back then.
-- wants is what the process asked for, so that others can yield to it.
CREATE TABLE flow_slots (
    route      text        NOT NULL,
    holder     text        NOT NULL,
    slots      integer     NOT NULL CHECK (slots >= 0),
    wants      integer     NOT NULL CHECK (wants >= 0),
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (route, holder)
);
