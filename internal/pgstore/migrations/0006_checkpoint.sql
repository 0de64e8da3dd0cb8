-- 0006: a job's checkpoint: progress a Go handler saved during an attempt,
-- handed to the next attempt (workers.Job.SaveCheckpoint). Not indexed, so
-- saving it is a HOT update.
ALTER TABLE jobs ADD COLUMN checkpoint bytea;
