-- 0022: a limited route's runnable jobs in claim order (scheduled_at,
-- id): a grouped route's window claim (pgstore's claimWindowSQL) takes
-- its next jobs from one range of it, each kept if its group has room,
-- instead of one walk step per group; a route capped by max_running
-- alone is claimed from it like any queue (claimCappedSQL), of whatever
-- group value its jobs carry (see internal/flow/doc.go). Like the indexes
-- of 0013, it holds the jobs of limited routes only (grp IS NOT NULL).
CREATE INDEX jobs_group_order_idx ON jobs (route, scheduled_at, id)
    WHERE state IN ('queued', 'retrying') AND grp IS NOT NULL;
