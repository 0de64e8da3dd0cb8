-- 0012: the coalesced state (a route's `coalesce: latest`): a job that a
-- newer record of its key replaced before it started, and that never
-- ran. Final, like skipped: retention removes it, a replay's --rerun runs
-- it again.
ALTER TABLE jobs DROP CONSTRAINT jobs_state_check;
ALTER TABLE jobs ADD CONSTRAINT jobs_state_check CHECK (state IN ('waiting','queued','running','retrying',
    'succeeded','dead','cancelled','skipped','expired','coalesced'));

-- Retention reads finished rows through this index; it must hold the new
-- final state too. (One pass over the finished rows.)
DROP INDEX jobs_finished_idx;
CREATE INDEX jobs_finished_idx ON jobs (state, finished_at)
    WHERE state IN ('succeeded', 'skipped', 'cancelled', 'expired', 'dead', 'coalesced');
