-- 0013: fleet-wide group caps and rate limits (SPEC §2 I9, §3 group and
-- rate_limit), beside the route-wide max_running of 0011's time.
--
-- grp is a job's group value, set only for the jobs of a flow-limited
-- route (max_running, group or rate_limit): the record's group value, or
-- '*' — one group — for a route without `group`. NULL marks every other
-- job, so the two indexes below hold the limited routes' jobs only and
-- cost the other routes nothing.
ALTER TABLE jobs ADD COLUMN grp text;

-- A limited route's claim walks its groups (route, grp) one index descent
-- each, and takes each group's oldest runnable jobs: a group with 10,000
-- jobs is one step of the walk, not 10,000 (see internal/flow/doc.go).
CREATE INDEX jobs_group_runnable_idx ON jobs (route, grp, scheduled_at, id)
    WHERE state IN ('queued', 'retrying') AND grp IS NOT NULL;

-- A limited route's running jobs, counted by route or by group under the
-- route's claim lock.
CREATE INDEX jobs_group_running_idx ON jobs (route, grp)
    WHERE state = 'running' AND grp IS NOT NULL;

-- A rate-limited route's GCRA state: the theoretical arrival time of its
-- next start. A route without a row has been idle: it may start a burst.
CREATE TABLE flow_rates (
    route text PRIMARY KEY,
    tat   timestamptz NOT NULL
);
