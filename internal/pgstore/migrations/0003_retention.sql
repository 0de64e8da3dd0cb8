-- 0003: the sweepers' paths, so that neither scans runnable work.

-- Retention: finished rows by state and age. Runnable rows are never in
-- it, so it costs the hot path nothing but an index entry at completion.
CREATE INDEX jobs_finished_idx ON jobs (state, finished_at)
    WHERE state IN ('succeeded', 'skipped', 'cancelled', 'expired', 'dead');

-- Expiry: only jobs that have a deadline. Without it the rescuer scanned
-- every queued job on every tick (measured: 200k queued jobs made it time
-- out and slowed claims tenfold).
CREATE INDEX jobs_deadline_idx ON jobs (deadline)
    WHERE deadline IS NOT NULL AND state IN ('queued', 'retrying');
