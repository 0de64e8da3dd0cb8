-- 0004: lanes_advance reads the ended heads by primary key only, frees or
-- blocks their lanes in one statement, and accepts jobs whose outcome was
-- stale (so that the completer can send it in the same round trip as the
-- outcomes, before knowing which applied).
--
-- Why: 0002's version joined jobs on `id = ANY(p_ids)` next to a state
-- filter in three statements. With statistics taken before any job had
-- finished, the planner read that join from jobs_finished_idx and filtered
-- every finished row by id: 12 ms per completion batch after 15,000 jobs
-- and growing with history (ordered throughput 2.8k-5.6k jobs/s). Only the
-- primary key can serve `id = ANY(...)` alone, so the plan no longer
-- depends on statistics; every later statement joins the arrays.
CREATE OR REPLACE FUNCTION lanes_advance(p_ids bigint[]) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    e_id    bigint[];  -- the jobs' lanes, by their (immutable) route and key
    e_route text[];
    e_key   text[];
    f_route text[];    -- freed non-strict lanes
    f_key   text[];
    v_route text[];    -- freed versioned lanes, with their last applied version
    v_key   text[];
    v_last  bigint[];
    s_route text[];    -- freed strict lanes
    s_key   text[];
BEGIN
    SELECT array_agg(id), array_agg(route), array_agg(key)
    INTO e_id, e_route, e_key
    FROM jobs WHERE id = ANY(p_ids) AND lane;
    IF e_id IS NULL THEN
        RETURN;
    END IF;

    -- Lanes are locked in (route, key) order, as every other path locks
    -- them, so that concurrent batches and ingest cannot deadlock.
    PERFORM 1 FROM lanes l
    JOIN unnest(e_route, e_key, e_id) AS e(route, key, id)
        ON l.route = e.route AND l.key = e.key AND l.head_job_id = e.id
    ORDER BY l.route, l.key
    FOR UPDATE OF l;

    -- The jobs' states are read only now, under the lane locks: every
    -- other path that changes a head's state (rescue, cancel, re-drive)
    -- takes its lane's lock first, so what is read here stays true until
    -- commit. p_ids may name jobs whose outcome was stale: those are not
    -- in a final state as head of their lane, and change nothing.
    --
    -- A dead head of an on_dead: block lane keeps the lane (blocked); any
    -- other ended head frees it. The version counts as applied when the
    -- job succeeded; for a strict lane a dead or cancelled head also
    -- consumes its version, or every later version would wait out a gap.
    WITH h AS MATERIALIZED (
        -- By primary key only, whatever the statistics say.
        SELECT e.route, e.key, e.id, j.version, j.state
        FROM unnest(e_route, e_key, e_id) AS e(route, key, id) JOIN jobs j ON j.id = e.id
    ), ended AS (
        UPDATE lanes l SET
            blocked = (h.state = 'dead' AND l.on_dead = 'block'),
            head_job_id = CASE WHEN h.state = 'dead' AND l.on_dead = 'block' THEN l.head_job_id END,
            last_version = CASE
                WHEN h.state = 'dead' AND l.on_dead = 'block' THEN l.last_version
                WHEN h.version IS NULL THEN l.last_version
                WHEN h.state = 'succeeded' OR l.policy = 'strict' THEN greatest(l.last_version, h.version)
                ELSE l.last_version END
        FROM h
        WHERE l.route = h.route AND l.key = h.key AND l.head_job_id = h.id
          AND h.state IN ('succeeded', 'dead', 'cancelled', 'expired', 'skipped')
        RETURNING l.route, l.key, l.policy, l.last_version, l.blocked
    )
    SELECT array_agg(route) FILTER (WHERE policy <> 'strict'), array_agg(key) FILTER (WHERE policy <> 'strict'),
        array_agg(route) FILTER (WHERE policy = 'newer' AND last_version IS NOT NULL),
        array_agg(key) FILTER (WHERE policy = 'newer' AND last_version IS NOT NULL),
        array_agg(last_version) FILTER (WHERE policy = 'newer' AND last_version IS NOT NULL),
        array_agg(route) FILTER (WHERE policy = 'strict'), array_agg(key) FILTER (WHERE policy = 'strict')
    INTO f_route, f_key, v_route, v_key, v_last, s_route, s_key
    FROM ended WHERE NOT blocked;

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
            RETURNING jobs.id, nxt.route, nxt.key
        )
        -- Joined on the lane's key, not CTE to CTE: the planner expects
        -- ten rows from each and nests the loops (seen: 80 x 80 scans).
        UPDATE lanes l SET head_job_id = q.id, gap_since = NULL
        FROM q WHERE l.route = q.route AND l.key = q.key;
    END IF;

    IF s_route IS NOT NULL THEN
        PERFORM lane_promote(f.route, f.key) FROM unnest(s_route, s_key) AS f(route, key) ORDER BY f.route, f.key;
    END IF;
END $$;
