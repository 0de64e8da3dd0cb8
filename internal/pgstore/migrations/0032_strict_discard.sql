-- 0032: a discarded dead head passes its strict lane's version.
--
-- Why: functions.sql's lanes_advance now counts the version of a strict
-- lane's dead head that an operator discards (on_dead: block) as passed,
-- as it did for one that ends under on_dead: continue: before, the lane's
-- next version waited out gap_timeout for the discarded one and was then
-- parked or run by gap_policy. No table changes; the migration marks the
-- functions' change, so that an older binary's migrate refuses this
-- schema rather than put the old function back.
SELECT 1;
