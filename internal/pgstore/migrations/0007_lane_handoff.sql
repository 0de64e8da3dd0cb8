-- 0007: lanes_advance can hand a freed lane's next job straight to the
-- pool that ran its predecessor: the job goes waiting -> running in the
-- completion transaction, leased as a claim would (attempt counted, fresh
-- fencing token), and comes back to the completer, instead of going
-- waiting -> queued here and queued -> running in a claim.
--
-- Why: an ordered job cost three row versions of jobs (promotion, claim,
-- completion) where an unordered one costs two, every one a non-HOT
-- update writing every index: measured 27 WAL records per ordered job
-- against 15 per unordered job, and ordered throughput 0.51-0.69 of
-- unordered, in proportion. A handed-off job skips the queued version and
-- the claim statement. See dispatch/doc.go for when a pool asks for it.
--
-- p_handoff names the ended heads whose lane's next job may be handed
-- off, with the queue of the pool asking (p_queue: the job is handed off
-- only if it belongs to that queue) and the lease it takes (p_lease_ms).
-- Every other next job is queued as before. The result is the handed-off
-- jobs, each with the id of the head it follows.
DROP FUNCTION lanes_advance(bigint[]);
CREATE FUNCTION lanes_advance(p_ids bigint[], p_handoff bigint[], p_queue text[], p_lease_ms bigint[])
RETURNS TABLE (prev_id bigint, job jobs)
LANGUAGE plpgsql AS $$
DECLARE
    e_id    bigint[];  -- the jobs' lanes, by their (immutable) route and key
    e_route text[];
    e_key   text[];
    f_route text[];    -- freed non-strict lanes, with the head that ended
    f_key   text[];
    f_prev  bigint[];
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
        RETURNING l.route, l.key, l.policy, l.last_version, l.blocked, h.id
    )
    SELECT array_agg(route) FILTER (WHERE policy <> 'strict'), array_agg(key) FILTER (WHERE policy <> 'strict'),
        array_agg(id) FILTER (WHERE policy <> 'strict'),
        array_agg(route) FILTER (WHERE policy = 'newer' AND last_version IS NOT NULL),
        array_agg(key) FILTER (WHERE policy = 'newer' AND last_version IS NOT NULL),
        array_agg(last_version) FILTER (WHERE policy = 'newer' AND last_version IS NOT NULL),
        array_agg(route) FILTER (WHERE policy = 'strict'), array_agg(key) FILTER (WHERE policy = 'strict')
    INTO f_route, f_key, f_prev, v_route, v_key, v_last, s_route, s_key
    FROM ended WHERE NOT blocked;

    IF v_route IS NOT NULL THEN
        UPDATE jobs w SET state = 'skipped', finished_at = now(),
            last_error = format('version %s is not newer than the last applied version %s', w.version, f.last)
        FROM unnest(v_route, v_key, v_last) AS f(route, key, last)
        WHERE w.route = f.route AND w.key = f.key AND w.state = 'waiting' AND w.version <= f.last;
    END IF;

    IF f_route IS NOT NULL THEN
        RETURN QUERY
        WITH nxt AS (
            SELECT f.route, f.key, f.prev, w.id, h.queue, h.lease_ms
            FROM unnest(f_route, f_key, f_prev) AS f(route, key, prev)
            CROSS JOIN LATERAL (
                SELECT id FROM jobs
                WHERE route = f.route AND key = f.key AND state = 'waiting'
                ORDER BY version NULLS FIRST, src_offset, id
                LIMIT 1
            ) w
            LEFT JOIN unnest(p_handoff, p_queue, p_lease_ms) AS h(prev, queue, lease_ms) ON h.prev = f.prev
        ), q AS (
            -- Re-checked under the row lock: a job cancelled meanwhile is
            -- not promoted, and its lane gets no head (the next ingest into
            -- the lane promotes past it). A handed-off job is claimed here,
            -- exactly as JobClaim claims. The state test is wrapped so that
            -- no partial index can serve the join, only the primary key
            -- (see pgstore's heldSQL: stale statistics made the planner
            -- scan every such row per batch).
            UPDATE jobs SET scheduled_at = now(),
                state = CASE WHEN nxt.queue = jobs.queue THEN 'running' ELSE 'queued' END,
                attempts = CASE WHEN nxt.queue = jobs.queue THEN jobs.attempts + 1 ELSE jobs.attempts END,
                token = CASE WHEN nxt.queue = jobs.queue THEN nextval('job_token_seq') ELSE jobs.token END,
                started_at = CASE WHEN nxt.queue = jobs.queue THEN now() ELSE jobs.started_at END,
                lease_expires_at = CASE WHEN nxt.queue = jobs.queue
                    THEN now() + nxt.lease_ms * interval '1 millisecond' END
            FROM nxt WHERE jobs.id = nxt.id AND coalesce(jobs.state, '') = 'waiting'
            RETURNING jobs, nxt.route, nxt.key, nxt.prev
        ), u AS (
            -- Joined on the lane's key, not CTE to CTE: the planner expects
            -- ten rows from each and nests the loops (seen: 80 x 80 scans).
            UPDATE lanes l SET head_job_id = (q.jobs).id, gap_since = NULL
            FROM q WHERE l.route = q.route AND l.key = q.key
        )
        SELECT q.prev, q.jobs FROM q WHERE (q.jobs).state = 'running';
    END IF;

    IF s_route IS NOT NULL THEN
        PERFORM lane_promote(f.route, f.key) FROM unnest(s_route, s_key) AS f(route, key) ORDER BY f.route, f.key;
    END IF;
END $$;

