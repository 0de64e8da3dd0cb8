-- 0018: the audit log (SPEC §6): every operator action — cancel, re-drive,
-- discard, pause, resume, trigger, an enqueue through the admin API —
-- with who took it (an admin token's name, or cli:<user>), when, on what,
-- and what it did. A row is written in the transaction of the action it
-- records, so an action that committed is never missing from the log.
-- Kept for retention.audit (pgstore.AuditPrune).
CREATE TABLE audit_log (
    id     bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at     timestamptz NOT NULL DEFAULT now(),
    actor  text        NOT NULL,
    action text        NOT NULL,
    target text        NOT NULL,  -- job/17, dlq/4, queue/bulk, route/orders, schedule/nightly
    detail jsonb       NOT NULL DEFAULT '{}'
);
CREATE INDEX audit_log_at_idx ON audit_log (at);
