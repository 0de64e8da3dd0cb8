-- 0025: ends of jobs that SQL makes where no process's statement returns
-- them — a stale version skipped while a lane is promoted, by whichever
-- path promotes it (a completion, an ingest, a cancel's or a rescue's
-- trigger). Each such statement adds a row; every process's sampler takes
-- rows (DELETE … RETURNING) into its own switchyard_job_attempts_total, so
-- each end is counted by exactly one process, and one rolled back by none.
CREATE TABLE outcome_tally (
    kind    text   NOT NULL,
    outcome text   NOT NULL,
    n       bigint NOT NULL
);
