-- 0008: dedupe namespaces per origin, and bounded DLQ entries.
--
-- Why origin: jobs of a route came from Kafka records, the enqueue API or
-- a schedule, and the dedupe key of each lived in one namespace, told
-- apart only by a string prefix ("api/<Idempotency-Key>"). A Kafka record
-- whose dedupe field happened to read "api/k" then counted as a duplicate
-- of an API job and silently became no job (I2 read backwards: a record
-- lost). The origin is now part of the unique index, so no value of one
-- origin can ever collide with another's.
ALTER TABLE jobs ADD COLUMN origin text NOT NULL DEFAULT 'kafka'
    CONSTRAINT jobs_origin_check CHECK (origin IN ('kafka', 'api', 'schedule'));

-- Existing rows: a schedule's jobs have the route schedule/<name> (a
-- topic cannot contain a slash); API jobs have no Kafka position (an API
-- job of an ordered route was stored with an empty topic) and the api/
-- prefix, which goes.
UPDATE jobs SET origin = 'schedule' WHERE route LIKE 'schedule/%';
UPDATE jobs SET origin = 'api', dedupe_key = substr(dedupe_key, 5)
WHERE route NOT LIKE 'schedule/%' AND coalesce(src_topic, '') = '' AND dedupe_key LIKE 'api/%';

CREATE UNIQUE INDEX jobs_dedupe_origin_idx ON jobs (route, origin, dedupe_key);
DROP INDEX jobs_dedupe_idx;
ALTER INDEX jobs_dedupe_origin_idx RENAME TO jobs_dedupe_idx;

-- Why bounded entries: a record over max_record_bytes was parked whole
-- (20 records of 8 MB kept 160 MB, and one listing of them took the
-- process from 36 MB to 910 MB). A too_large entry now keeps a prefix of
-- the value (dlq.max_payload_bytes) and its source position; re-driving
-- it reads the whole record from Kafka again while the topic retains it.
-- record_key is the record's key, so that a parked record is decoded
-- again exactly as it was read (a route keyed by the record key needs it).
ALTER TABLE dlq_entries
    ADD COLUMN record_key bytea,
    ADD COLUMN truncated boolean NOT NULL DEFAULT false,
    ADD COLUMN record_bytes integer;
