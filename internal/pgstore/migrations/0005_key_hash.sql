-- 0005: the admin API's lookup by key through a hash index.
--
-- Why: no update of a job is HOT (every state change touches an indexed
-- column), so every claim, completion and heartbeat inserts a new entry
-- into every index. In the b-tree on (key, id) those inserts land on
-- random leaf pages, one per key; a hash index takes them in one bucket
-- page without a tree descent. Measured with the raw claim+complete loop
-- of `switchyard bench` (10,000 keys): b-tree 24.6k-27.8k jobs/s, hash
-- 28.9k-29.0k, no index 29.0k-30.7k. A key's jobs are few enough to sort
-- by id after the lookup.
DROP INDEX jobs_key_idx;
CREATE INDEX jobs_key_idx ON jobs USING hash (key) WHERE key <> '';
