-- 0017: a poison record is parked once per route. With several routes on
-- one topic, a record can be poison for two of them (a missing field for
-- one, too large for the other); keyed by its position alone, the second
-- route's entry was dropped as a duplicate of the first. The rebuilt
-- index is a superset of the old one's key, so every existing entry
-- satisfies it.
DROP INDEX dlq_entries_source_idx;
CREATE UNIQUE INDEX dlq_entries_source_idx ON dlq_entries (route, src_topic, src_partition, src_offset)
    WHERE job_id IS NULL;
