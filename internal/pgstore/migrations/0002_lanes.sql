-- 0002: per-key lanes for ordered routes (I3). See lanes/doc.go for the
-- design and why it is correct under concurrency.

ALTER TABLE jobs ADD COLUMN lane boolean NOT NULL DEFAULT false;

-- The promotion path: a lane's waiting jobs in (version, offset) order.
CREATE INDEX jobs_lane_waiting_idx ON jobs (route, key, version NULLS FIRST, src_offset, id)
    WHERE state = 'waiting';

CREATE TABLE lanes (
    route        text        NOT NULL,
    key          text        NOT NULL,
    -- none (no versions) | newer | strict
    policy       text        NOT NULL DEFAULT 'none',
    -- continue | block
    on_dead      text        NOT NULL DEFAULT 'continue',
    gap_timeout  interval    NOT NULL DEFAULT '5 minutes',
    -- proceed | park
    gap_policy   text        NOT NULL DEFAULT 'park',
    -- The one job of this lane that is queued, running, retrying, or dead
    -- and blocking. NULL: nothing in flight, the next waiting job may be
    -- promoted.
    head_job_id  bigint,
    last_version bigint,
    blocked      boolean     NOT NULL DEFAULT false,
    -- Set while a strict lane holds for a missing version.
    gap_since    timestamptz,
    PRIMARY KEY (route, key)
) WITH (fillfactor = 70); -- room for HOT updates: a lane's head changes with every job
CREATE INDEX lanes_gap_idx ON lanes (gap_since) WHERE gap_since IS NOT NULL;
CREATE INDEX lanes_blocked_idx ON lanes (route) WHERE blocked;

-- lane_promote makes the next waiting job of an idle lane its head.
-- Stale versions are skipped on the way (never delivered); a strict lane
-- holds on a gap until gap_timeout, then parks or proceeds.
-- Callers hold, or this takes, the lane's row lock: promotion is serial
-- per lane.
CREATE FUNCTION lane_promote(p_route text, p_key text) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    l lanes%ROWTYPE;
    j record;
BEGIN
    SELECT * INTO l FROM lanes WHERE route = p_route AND key = p_key FOR UPDATE;
    IF NOT FOUND OR l.head_job_id IS NOT NULL OR l.blocked THEN
        RETURN;
    END IF;
    LOOP
        SELECT id, version INTO j FROM jobs
        WHERE route = p_route AND key = p_key AND state = 'waiting'
        ORDER BY version NULLS FIRST, src_offset, id
        LIMIT 1 FOR UPDATE;
        IF NOT FOUND THEN
            IF l.gap_since IS NOT NULL THEN
                UPDATE lanes SET gap_since = NULL WHERE route = p_route AND key = p_key;
            END IF;
            RETURN;
        END IF;
        IF l.policy <> 'none' AND l.last_version IS NOT NULL AND j.version <= l.last_version THEN
            UPDATE jobs SET state = 'skipped', finished_at = now(),
                last_error = format('version %s is not newer than the last applied version %s', j.version, l.last_version)
            WHERE id = j.id;
            CONTINUE;
        END IF;
        IF l.policy = 'strict' AND l.last_version IS NOT NULL AND j.version > l.last_version + 1 THEN
            IF l.gap_since IS NULL THEN
                UPDATE lanes SET gap_since = now() WHERE route = p_route AND key = p_key;
                RETURN;
            END IF;
            IF now() < l.gap_since + l.gap_timeout THEN
                RETURN;
            END IF;
            IF l.gap_policy = 'park' THEN
                UPDATE jobs SET state = 'dead', finished_at = now(),
                    last_error = format('version %s waited %s for version %s', j.version, l.gap_timeout, l.last_version + 1)
                WHERE id = j.id;
                INSERT INTO dlq_entries (reason, route, queue, job_id, src_topic, src_partition, src_offset,
                    attempts, last_error, errors, payload, header_keys, header_values)
                SELECT 'gap', route, queue, id, src_topic, src_partition, src_offset, attempts,
                    last_error, errors, payload, header_keys, header_values
                FROM jobs WHERE id = j.id
                ON CONFLICT DO NOTHING;
                l.last_version := j.version;
                l.gap_since := NULL;
                UPDATE lanes SET last_version = j.version, gap_since = NULL WHERE route = p_route AND key = p_key;
                CONTINUE;
            END IF;
            -- gap_policy proceed: run it despite the gap.
        END IF;
        UPDATE jobs SET state = 'queued', scheduled_at = now() WHERE id = j.id;
        UPDATE lanes SET head_job_id = j.id, gap_since = NULL WHERE route = p_route AND key = p_key;
        RETURN;
    END LOOP;
END $$;

-- lane_job_changed advances a lane when its head finishes, in the same
-- transaction as the state change, whichever path made it (completion,
-- rescue, cancel, expiry, re-drive). Being a trigger, no path can forget.
CREATE FUNCTION lane_job_changed() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    l lanes%ROWTYPE;
BEGIN
    -- Look before locking: a job that is not the head cannot become it
    -- while we hold its row (promotion locks the job first), so the
    -- unlocked read is safe, and skipping the lock for non-heads keeps a
    -- cancel of a waiting job from deadlocking with an ingest that holds
    -- the lane and is promoting that very job.
    IF NOT EXISTS (SELECT 1 FROM lanes WHERE route = NEW.route AND key = NEW.key AND head_job_id = NEW.id) THEN
        RETURN NULL; -- not the head: a skipped or parked job, or a stray
    END IF;
    SELECT * INTO l FROM lanes WHERE route = NEW.route AND key = NEW.key FOR UPDATE;
    IF OLD.state = 'dead' THEN
        -- Re-driven in place: the lane runs it again, then moves on.
        UPDATE lanes SET blocked = false WHERE route = NEW.route AND key = NEW.key;
        RETURN NULL;
    END IF;
    IF NEW.state = 'dead' AND l.on_dead = 'block' THEN
        UPDATE lanes SET blocked = true WHERE route = NEW.route AND key = NEW.key;
        RETURN NULL;
    END IF;
    -- The version counts as applied when the job succeeded; for a strict
    -- lane a dead or cancelled head also consumes its version, or every
    -- later version would wait out a gap for it.
    UPDATE lanes SET head_job_id = NULL,
        last_version = CASE
            WHEN NEW.version IS NULL THEN last_version
            WHEN NEW.state = 'succeeded' OR policy = 'strict' THEN greatest(last_version, NEW.version)
            ELSE last_version END
    WHERE route = NEW.route AND key = NEW.key;
    PERFORM lane_promote(NEW.route, NEW.key);
    RETURN NULL;
END $$;

-- The completer ends heads in batches and advances their lanes set-based
-- with lanes_advance() in the same transaction; it sets
-- switchyard.lanes_batched for that transaction so that the per-row
-- trigger stays out of its way. Every other path relies on the trigger.
CREATE TRIGGER jobs_lane_advance AFTER UPDATE OF state ON jobs
    FOR EACH ROW
    WHEN (NEW.lane AND OLD.state IS DISTINCT FROM NEW.state
          AND (NEW.state IN ('succeeded', 'dead', 'cancelled', 'expired', 'skipped') OR OLD.state = 'dead')
          AND current_setting('switchyard.lanes_batched', true) IS DISTINCT FROM 'on')
    EXECUTE FUNCTION lane_job_changed();

-- lanes_advance is lane_job_changed for a batch of ended heads, in a
-- constant number of statements instead of several per job: lock the
-- lanes in (route, key) order, block or free them, skip every stale
-- waiting job of the freed newer/strict lanes at once, then promote the
-- next waiting job of each freed lane. Strict lanes go through
-- lane_promote, which owns gap handling.
CREATE FUNCTION lanes_advance(p_ids bigint[]) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    f_route text[];  -- freed non-strict lanes
    f_key   text[];
    v_route text[];  -- freed versioned lanes, with their last applied version
    v_key   text[];
    v_last  bigint[];
    s_route text[];  -- freed strict lanes
    s_key   text[];
BEGIN
    PERFORM 1 FROM lanes l JOIN jobs j ON l.route = j.route AND l.key = j.key AND l.head_job_id = j.id
    WHERE j.id = ANY(p_ids)
    ORDER BY l.route, l.key
    FOR UPDATE OF l;

    UPDATE lanes l SET blocked = true
    FROM jobs j
    WHERE j.id = ANY(p_ids) AND l.route = j.route AND l.key = j.key AND l.head_job_id = j.id
      AND j.state = 'dead' AND l.on_dead = 'block';

    WITH freed AS (
        UPDATE lanes l SET head_job_id = NULL,
            last_version = CASE
                WHEN j.version IS NULL THEN l.last_version
                WHEN j.state = 'succeeded' OR l.policy = 'strict' THEN greatest(l.last_version, j.version)
                ELSE l.last_version END
        FROM jobs j
        WHERE j.id = ANY(p_ids) AND l.route = j.route AND l.key = j.key AND l.head_job_id = j.id
          AND j.state IN ('succeeded', 'dead', 'cancelled', 'expired', 'skipped')
          AND NOT (j.state = 'dead' AND l.on_dead = 'block')
        RETURNING l.route, l.key, l.policy, l.last_version
    )
    SELECT array_agg(route) FILTER (WHERE policy <> 'strict'), array_agg(key) FILTER (WHERE policy <> 'strict'),
        array_agg(route) FILTER (WHERE policy = 'newer' AND last_version IS NOT NULL),
        array_agg(key) FILTER (WHERE policy = 'newer' AND last_version IS NOT NULL),
        array_agg(last_version) FILTER (WHERE policy = 'newer' AND last_version IS NOT NULL),
        array_agg(route) FILTER (WHERE policy = 'strict'), array_agg(key) FILTER (WHERE policy = 'strict')
    INTO f_route, f_key, v_route, v_key, v_last, s_route, s_key
    FROM freed;

    IF v_route IS NOT NULL THEN
        UPDATE jobs w SET state = 'skipped', finished_at = now(),
            last_error = format('version %s is not newer than the last applied version %s', w.version, f.last)
        FROM unnest(v_route, v_key, v_last) AS f(route, key, last)
        WHERE w.route = f.route AND w.key = f.key AND w.state = 'waiting' AND w.version <= f.last;
    END IF;

    IF f_route IS NOT NULL THEN
        WITH nxt AS (
            SELECT f.route, f.key, w.id
            FROM unnest(f_route, f_key) AS f(route, key)
            CROSS JOIN LATERAL (
                SELECT id FROM jobs
                WHERE route = f.route AND key = f.key AND state = 'waiting'
                ORDER BY version NULLS FIRST, src_offset, id
                LIMIT 1
            ) w
        ), q AS (
            -- Re-checked under the row lock: a job cancelled meanwhile is
            -- not promoted, and its lane gets no head (the next ingest into
            -- the lane promotes past it).
            UPDATE jobs SET state = 'queued', scheduled_at = now()
            FROM nxt WHERE jobs.id = nxt.id AND jobs.state = 'waiting'
            RETURNING jobs.id
        )
        UPDATE lanes l SET head_job_id = nxt.id, gap_since = NULL
        FROM nxt JOIN q ON q.id = nxt.id
        WHERE l.route = nxt.route AND l.key = nxt.key;
    END IF;

    IF s_route IS NOT NULL THEN
        PERFORM lane_promote(f.route, f.key) FROM unnest(s_route, s_key) AS f(route, key) ORDER BY f.route, f.key;
    END IF;
END $$;
