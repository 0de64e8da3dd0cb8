-- 0035: enqueue() takes a grouped route's group value (group_value).
--
-- No table changes: functions.sql drops enqueue()'s old signature and
-- makes the new one. The migration is here so that a binary from before
-- it, whose migrate would put the old function back under a fleet that
-- calls the new one, refuses the schema instead.
SELECT 1;
