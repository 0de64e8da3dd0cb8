-- 0003: the retention sweeper's path: finished rows by state and age.
-- Runnable rows are never in it, so it costs the hot path nothing but an
-- index entry at completion.
CREATE INDEX jobs_finished_idx ON jobs (state, finished_at)
    WHERE state IN ('succeeded', 'skipped', 'cancelled', 'expired', 'dead');
