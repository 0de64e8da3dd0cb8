-- 0015: the deployment's attempt key (SPEC §5 HTTP checkpoints). Every
-- attempt is handed to its target with Switchyard-Attempt-Secret, an HMAC
-- of the job's id and the attempt's fencing token under this key, which
-- the target shows to POST /v1/jobs/{id}/checkpoint: any process of the
-- deployment can check it, and no secret is stored per attempt. 32 bytes
-- from gen_random_uuid (pg_strong_random), made once, here.
CREATE TABLE attempt_key (
    one boolean PRIMARY KEY DEFAULT true CHECK (one),
    key bytea   NOT NULL CHECK (length(key) = 32)
);
INSERT INTO attempt_key (key) SELECT uuid_send(gen_random_uuid()) || uuid_send(gen_random_uuid());
