-- 0021: schedules can be paused too (POST /v1/schedules/{name}/pause):
-- a paused schedule's slots pass without jobs until it is resumed.
ALTER TABLE paused DROP CONSTRAINT paused_kind_check;
ALTER TABLE paused ADD CONSTRAINT paused_kind_check CHECK (kind IN ('queue', 'route', 'schedule'));
