-- 0026: the trace context (a W3C traceparent) of the span of a job's last
-- attempt that recorded an outcome, written only while tracing is on, so
-- that a retry's span can link to the attempt before it, whichever
-- process ran that one. NULL otherwise; nullable, so adding it rewrites
-- nothing.
ALTER TABLE jobs ADD COLUMN attempt_span text;
