-- 0017: a grouped route's runnable jobs in claim order (scheduled_at,
-- id), for its window claim (pgstore's claimWindowSQL): the route's next
-- jobs from one index range, each kept if its group has room, instead of
-- one walk step per group (see internal/flow/doc.go). Like the indexes of
-- 0013, it holds the jobs of limited routes only (grp IS NOT NULL).
CREATE INDEX jobs_group_order_idx ON jobs (route, scheduled_at, id)
    WHERE state IN ('queued', 'retrying') AND grp IS NOT NULL;
