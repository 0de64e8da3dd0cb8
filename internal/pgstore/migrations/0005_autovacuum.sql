-- 0005: vacuum and analyze the queue tables on a fraction of the default
-- thresholds.
--
-- Why: every claim and completion leaves a dead tuple and dead index
-- entries; a claim from the beginning of the claim index walks every dead
-- entry since the last vacuum (pools working through a backlog skip most of
-- them with claim positions, but idle queues and the periodic claim from
-- the beginning do not), and the planner chose a plan that read every
-- finished row when the statistics predated the first finished job. The
-- default (20% of the table changed) lets a table of 10M retained jobs
-- collect 2M dead rows between runs; 1% bounds it at 100k.
ALTER TABLE jobs SET (autovacuum_vacuum_scale_factor = 0.01, autovacuum_analyze_scale_factor = 0.01,
    autovacuum_vacuum_insert_scale_factor = 0.01);
ALTER TABLE lanes SET (autovacuum_vacuum_scale_factor = 0.02, autovacuum_analyze_scale_factor = 0.02);
