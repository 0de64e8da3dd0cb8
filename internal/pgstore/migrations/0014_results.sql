-- 0014: a job's result (SPEC §3 result_max_bytes): the first bytes of an
-- HTTP target's 2xx body, with its content type, or what a Go handler
-- kept with Job.SetResult. Written by the completion that records the
-- success, in the same row; retention removes it with the job. Nullable
-- columns: no rewrite of the table.
ALTER TABLE jobs ADD COLUMN result bytea, ADD COLUMN result_type text;
