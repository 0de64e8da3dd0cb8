-- The live definition of every function and trigger of the schema: the
-- job and lane state machine. Tables and indexes live in the numbered
-- migrations; this file is applied after them, by `switchyard migrate`
-- under its advisory lock, whenever its SHA-256 (as rendered) differs from
-- the one recorded in schema_functions, so it must be idempotent: CREATE
-- OR REPLACE, and DROP IF EXISTS for a signature that changed. See
-- internal/pgstore/doc.go and lanes/doc.go.

-- The file is a Go text/template: the one action in it, claim, stands for
-- the SET list of a claim (pgstore's claimSet), which JobClaim uses too,
-- so that a claim is defined once; migrate renders it before applying.

-- lane_promote makes the next waiting job of an idle lane its head.
-- Stale versions are skipped on the way (never delivered); a strict lane
-- holds on a gap until gap_timeout, then parks or proceeds.
-- Callers hold, or this takes, the lane's row lock: promotion is serial
-- per lane. A lane pruned while idle (pgstore.LanePrune) is made again,
-- with its route's settings as the processes last published them: the
-- caller puts a job back into it (a re-run, a re-drive).
CREATE OR REPLACE FUNCTION lane_promote(p_route text, p_key text) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    l lanes%ROWTYPE;
    j record;
BEGIN
    LOOP
        SELECT * INTO l FROM lanes WHERE route = p_route AND key = p_key FOR UPDATE;
        EXIT WHEN FOUND;
        -- Pruned: make it again. On a conflict another transaction made
        -- it meanwhile, and the next turn locks that one (or, pruned
        -- again in between, makes it once more).
        INSERT INTO lanes (route, key, policy, on_dead, gap_timeout, gap_policy)
        SELECT p_route, p_key, coalesce(r.lane_policy, 'none'), coalesce(r.on_dead, 'continue'),
            coalesce(r.gap_timeout, interval '5 minutes'), coalesce(r.gap_policy, 'park')
        FROM (SELECT) one LEFT JOIN LATERAL (
            SELECT * FROM routes WHERE routes.route = p_route AND routes.lane_policy IS NOT NULL LIMIT 1) r ON true
        ON CONFLICT (route, key) DO NOTHING;
    END LOOP;
    IF l.head_job_id IS NOT NULL OR l.blocked THEN
        RETURN;
    END IF;
    LOOP
        SELECT id, version, kind INTO j FROM jobs
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
            INSERT INTO outcome_tally (kind, outcome, n) VALUES (j.kind, 'skipped', 1);
            CONTINUE;
        END IF;
        -- The version a strict lane waits for is the one after the last it
        -- applied or passed (gave up on: dead, discarded, parked), so that
        -- one it could not apply holds nothing up. Staleness, above, is
        -- judged by the applied version alone: the job of a version passed
        -- unapplied still runs, re-driven or late. (NULL, no version yet,
        -- compares as no gap.)
        IF l.policy = 'strict' AND j.version > greatest(l.last_version, l.passed_version) + 1 THEN
            IF l.gap_since IS NULL THEN
                UPDATE lanes SET gap_since = now() WHERE route = p_route AND key = p_key;
                RETURN;
            END IF;
            IF now() < l.gap_since + l.gap_timeout THEN
                RETURN;
            END IF;
            IF l.gap_policy = 'park' THEN
                UPDATE jobs SET state = 'dead', finished_at = now(),
                    last_error = format('version %s waited %s for version %s', j.version, l.gap_timeout,
                        greatest(l.last_version, l.passed_version) + 1)
                WHERE id = j.id;
                INSERT INTO dlq_entries (reason, route, queue, job_id, src_topic, src_partition, src_offset,
                    attempts, last_error, errors, payload, header_keys, header_values)
                SELECT 'gap', route, queue, id, src_topic, src_partition, src_offset, attempts,
                    last_error, errors, payload, header_keys, header_values
                FROM jobs WHERE id = j.id
                ON CONFLICT DO NOTHING;
                l.passed_version := j.version;
                l.gap_since := NULL;
                UPDATE lanes SET passed_version = j.version, gap_since = NULL WHERE route = p_route AND key = p_key;
                CONTINUE;
            END IF;
            -- gap_policy proceed: run it despite the gap.
        END IF;
        -- A head whose run_at is still ahead keeps it, and holds its lane
        -- until then.
        UPDATE jobs SET state = 'queued', scheduled_at = greatest(scheduled_at, now()) WHERE id = j.id;
        UPDATE lanes SET head_job_id = j.id, gap_since = NULL WHERE route = p_route AND key = p_key;
        RETURN;
    END LOOP;
END $$;

-- The signatures lanes_advance had before (migrations 0002, 0004, 0007).
DROP FUNCTION IF EXISTS lanes_advance(bigint[]);
DROP FUNCTION IF EXISTS lanes_advance(bigint[], bigint[], text[], bigint[]);
DROP FUNCTION IF EXISTS lanes_advance(bigint[], bigint[], text[], bigint[], bigint[]);

-- lanes_advance is THE rule of how a lane's head ends, and what follows,
-- for a batch of jobs in a constant number of statements. Every path
-- that changes a head goes through it: the completer (p_ids, with
-- handoffs), the trigger below for everything else (completion of a Go
-- handler's ordering.Apply, rescue, cancel, expiry, re-drive), and DLQ
-- discard (p_discarded). For each job of p_ids that heads its lane:
--
--   its state           under on_dead  the lane
--   succeeded, skipped,                freed; a succeeded head's version
--   cancelled, expired                 counts as applied (last_version),
--   dead                continue       and under policy strict any other
--                                      ended head's as passed
--                                      (passed_version), or every later
--                                      version would wait out a gap for it
--   dead                block          blocked: nothing is promoted
--   discarded (dead)                   freed, its version not applied
--                                      (passed under policy strict, as
--                                      an ended head's, for that reason)
--   not final, lane blocked            unblocked: re-driven in place, the
--                                      head runs again
--   not final otherwise                unchanged (a stale outcome: the job
--                                      was claimed again)
--
-- A freed lane skips its waiting jobs whose version is not newer than the
-- last applied one (policy newer; strict lanes go through lane_promote,
-- which owns gap handling) and promotes its next waiting job: to running
-- for the pool that asked for a handoff (p_handoff names the ended head,
-- p_queue the asking pool's queue, which the next job must be of, and
-- p_lease_ms its lease; claimed as JobClaim claims), else to queued. The result is the handed-off
-- jobs, each with the id of the head it follows.
--
-- A head whose success the same transaction recorded has left jobs for
-- job_history (pgstore's completeSQL): the completer passes its id, route,
-- key and version in p_gone_* (and not in p_ids: each is looked up once),
-- and a job of p_gone that jobs no longer holds ended as succeeded. One
-- that jobs still holds is read from it as any other (its outcome was
-- stale). A job that left jobs earlier, by another attempt's success,
-- heads no lane any more: the lanes join below finds nothing for it.
--
-- The lanes locked first are read and written after by their row's
-- position (ctid), not their key: no other transaction can move a row we
-- hold locked, and this function writes each one once, last. (Each later
-- statement descended lanes_pkey by text key for every lane again: with
-- a gone head's second lookup, a fifth of the buffers lanes_advance
-- touched in bench --only ordered; docs/performance.md.)
--
-- Its planner settings are its own, for this function only. Every
-- statement here reads lanes and jobs by key, a few hundred rows per
-- batch at most, and enable_seqscan = off keeps it that way whatever the
-- statistics and the batch's length: the custom plans that see a batch
-- of 100 ends costed a scan of 10,000 lanes and a hash join below 100
-- probes of lanes_pkey, for the lane locks and the new heads' update
-- (0.8 ms a batch, 12 ms under load; TestLanesAdvanceJoinsByKey, both
-- plan modes). Sorts and bitmap scans stay allowed, whatever its caller
-- set: a completion batch calls it after pgstore's planSQL, and under
-- that statement's settings it ran the ordered benchmark at 745 jobs/s.
CREATE OR REPLACE FUNCTION lanes_advance(p_ids bigint[], p_handoff bigint[] DEFAULT '{}',
    p_queue text[] DEFAULT '{}', p_lease_ms bigint[] DEFAULT '{}', p_discarded bigint[] DEFAULT '{}',
    p_gone_id bigint[] DEFAULT '{}', p_gone_route text[] DEFAULT '{}', p_gone_key text[] DEFAULT '{}',
    p_gone_version bigint[] DEFAULT '{}')
RETURNS TABLE (prev_id bigint, job jobs)
LANGUAGE plpgsql SET enable_seqscan = off SET enable_bitmapscan = on SET enable_sort = on AS $$
DECLARE
    e_id    bigint[];  -- the heads among the jobs, with their lanes' (immutable) route and key
    e_route text[];
    e_key   text[];
    e_gone  bigint[];  -- the version of a job that left jobs as succeeded
    e_left  boolean[]; -- whether it did
    e_lane  tid[];     -- and their lane rows, locked
    f_route text[];    -- freed non-strict lanes, with the head that left
    f_key   text[];
    f_prev  bigint[];
    f_last  bigint[];  -- and their last applied version from now on
    f_lane  tid[];
    v_route text[];    -- freed versioned lanes, with their last applied version
    v_key   text[];
    v_last  bigint[];
    s_route text[];    -- freed strict lanes
    s_key   text[];
BEGIN
    -- The heads among the jobs, their lanes locked in (route, key) order,
    -- as every other path locks them, so that concurrent batches and
    -- ingest cannot deadlock. A job that is not its lane's head takes no
    -- lock at all.
    --
    -- The jobs and their lanes are read first, apart from the locking
    -- statement. A lane written by another transaction since that
    -- statement's snapshot (an ingest's lanes_upsert writing changed
    -- settings: a config change, two versions of a config in a rolling
    -- deploy) is locked in its newest version and re-checked
    -- (EvalPlanQual); with the jobs rows this transaction had just
    -- written or deleted joined into the statement, the re-check dropped
    -- the lane of a head it matched, and that lane kept its gone head for
    -- good: its jobs never ran again (TestLaneAdvancesBesideASettingsChange).
    SELECT array_agg(id), array_agg(route), array_agg(key), array_agg(version), array_agg(left_jobs)
    INTO e_id, e_route, e_key, e_gone, e_left
    FROM (
        SELECT id, route, key, NULL::bigint AS version, false AS left_jobs FROM jobs WHERE id = ANY(p_ids) AND lane
        UNION ALL
        SELECT g.id, g.route, g.key, g.version, j.id IS NULL
        FROM unnest(p_gone_id, p_gone_route, p_gone_key, p_gone_version) AS g(id, route, key, version)
        LEFT JOIN jobs j ON j.id = g.id
    ) e;
    IF e_id IS NULL THEN
        RETURN;
    END IF;
    SELECT array_agg(id), array_agg(route), array_agg(key), array_agg(version), array_agg(left_jobs),
        array_agg(lane)
    INTO e_id, e_route, e_key, e_gone, e_left, e_lane
    FROM (
        SELECT e.*, l.ctid AS lane
        FROM unnest(e_id, e_route, e_key, e_gone, e_left) AS e(id, route, key, version, left_jobs)
        JOIN lanes l ON l.route = e.route AND l.key = e.key AND l.head_job_id = e.id
        ORDER BY l.route, l.key
        FOR UPDATE OF l
    ) heads;
    IF e_id IS NULL THEN
        RETURN;
    END IF;

    -- The jobs' states are read only now, under the lane locks: every
    -- other path that changes a head's state (rescue, cancel, re-drive)
    -- takes its lane's lock first, so what is read here stays true until
    -- commit.
    WITH h AS MATERIALIZED (
        -- By primary key only, whatever the statistics say.
        SELECT e.route, e.key, e.id, e.lane, j.version, l.policy, l.last_version, l.passed_version,
            CASE
                WHEN e.id = ANY(p_discarded) AND j.state = 'dead' THEN 'leave'
                WHEN j.state IN ('succeeded', 'skipped', 'cancelled', 'expired', 'coalesced') THEN 'end'
                WHEN j.state = 'dead' AND l.on_dead = 'block' THEN 'block'
                WHEN j.state = 'dead' THEN 'end'
                WHEN l.blocked THEN 'resume'
            END AS change,
            j.state = 'succeeded' AS applies
        FROM unnest(e_route, e_key, e_id, e_gone, e_left, e_lane) AS e(route, key, id, gone_version, left_jobs, lane)
        CROSS JOIN LATERAL (
            SELECT state, version FROM jobs WHERE id = e.id AND NOT e.left_jobs
            UNION ALL
            SELECT 'succeeded', e.gone_version WHERE e.left_jobs
        ) j
        JOIN lanes l ON l.ctid = e.lane
    ), c AS (
        -- What each change leaves in the lane: its last applied version,
        -- its last passed one, and whether the lane is written later,
        -- once, with its next head (a freed non-strict lane: one row
        -- version a job, not two). A strict lane passes a dead head's
        -- version, whether it ends under on_dead: continue or is discarded
        -- under block (else the next version waited out gap_timeout for
        -- it), but applies only a success's: the dead job, re-driven, runs.
        SELECT route, key, id, lane, policy, change,
            CASE WHEN applies AND version IS NOT NULL
                THEN greatest(last_version, version) ELSE last_version END AS last_version,
            CASE WHEN change IN ('end', 'leave') AND policy = 'strict' AND NOT applies AND version IS NOT NULL
                THEN greatest(passed_version, version) ELSE passed_version END AS passed_version,
            change IN ('end', 'leave') AND policy <> 'strict' AS deferred
        FROM h WHERE change IS NOT NULL
    ), changed AS (
        UPDATE lanes l SET
            blocked = (c.change = 'block'),
            head_job_id = CASE WHEN c.change IN ('block', 'resume') THEN l.head_job_id END,
            last_version = c.last_version, passed_version = c.passed_version
        FROM c
        WHERE l.ctid = c.lane AND NOT c.deferred
    )
    SELECT array_agg(route) FILTER (WHERE deferred), array_agg(key) FILTER (WHERE deferred),
        array_agg(id) FILTER (WHERE deferred), array_agg(last_version) FILTER (WHERE deferred),
        array_agg(lane) FILTER (WHERE deferred),
        array_agg(route) FILTER (WHERE policy = 'newer' AND last_version IS NOT NULL),
        array_agg(key) FILTER (WHERE policy = 'newer' AND last_version IS NOT NULL),
        array_agg(last_version) FILTER (WHERE policy = 'newer' AND last_version IS NOT NULL),
        array_agg(route) FILTER (WHERE policy = 'strict'), array_agg(key) FILTER (WHERE policy = 'strict')
    INTO f_route, f_key, f_prev, f_last, f_lane, v_route, v_key, v_last, s_route, s_key
    FROM c WHERE change IN ('end', 'leave');

    IF v_route IS NOT NULL THEN
        WITH skipped AS (
            UPDATE jobs w SET state = 'skipped', finished_at = now(),
                last_error = format('version %s is not newer than the last applied version %s', w.version, f.last)
            FROM unnest(v_route, v_key, v_last) AS f(route, key, last)
            WHERE w.route = f.route AND w.key = f.key AND w.state = 'waiting' AND w.version <= f.last
            RETURNING w.kind
        )
        INSERT INTO outcome_tally (kind, outcome, n)
        SELECT kind, 'skipped', count(*) FROM skipped GROUP BY kind;
    END IF;

    IF f_route IS NOT NULL THEN
        RETURN QUERY
        WITH nxt AS (
            -- Each freed lane, with its next waiting job if it has one.
            -- lease_ms is set when the pool that ran the head takes it (a
            -- job of its queue that may run now: one whose run_at is ahead
            -- waits, queued, holding its lane).
            SELECT f.route, f.key, f.prev, f.last, f.lane, w.id,
                CASE WHEN w.queue = h.queue AND w.scheduled_at <= now() THEN h.lease_ms END AS lease_ms
            FROM unnest(f_route, f_key, f_prev, f_last, f_lane) AS f(route, key, prev, last, lane)
            LEFT JOIN LATERAL (
                SELECT id, queue, scheduled_at FROM jobs
                WHERE route = f.route AND key = f.key AND state = 'waiting'
                ORDER BY version NULLS FIRST, src_offset, id
                LIMIT 1
            ) w ON true
            LEFT JOIN unnest(p_handoff, p_queue, p_lease_ms) AS h(prev, queue, lease_ms) ON h.prev = f.prev
        ), q AS (
            -- Re-checked under the row lock the update takes: a job
            -- cancelled meanwhile is not promoted, and its lane gets no
            -- head (the next ingest into the lane promotes past it, or
            -- else the lanes' prune: pgstore.LanePrune). The
            -- state test is wrapped so that no partial index can serve the
            -- join, only the primary key (see pgstore's heldSQL: stale
            -- statistics made the planner scan every such row per batch).
            UPDATE jobs j SET state = 'queued', scheduled_at = greatest(j.scheduled_at, now())
            FROM nxt WHERE j.id = nxt.id AND nxt.lease_ms IS NULL AND coalesce(j.state, '') = 'waiting'
            RETURNING j.id
        ), handed AS (
            -- Handed off: claimed here, as JobClaim claims.
            UPDATE jobs j SET scheduled_at = now(), {{claim "j" "nxt.lease_ms"}}
            FROM nxt WHERE j.id = nxt.id AND nxt.lease_ms IS NOT NULL AND coalesce(j.state, '') = 'waiting'
            RETURNING j AS job, j.id
        ), promoted AS (
            SELECT id FROM q UNION ALL SELECT id FROM handed
        ), heads AS (
            -- Each freed lane's head from now on: none when no job was
            -- promoted. A hashed lookup: joined to the lanes on their key,
            -- the planner expects ten rows from each side and nests loops
            -- over them (seen: 100 x 100 text comparisons).
            SELECT lane, last, CASE WHEN id IN (SELECT id FROM promoted) THEN id END AS id FROM nxt
        ), u AS (
            -- Each freed lane written once: its next head and the version
            -- its ended head applied.
            UPDATE lanes l SET head_job_id = n.id, blocked = false, last_version = n.last,
                gap_since = CASE WHEN n.id IS NULL THEN l.gap_since END
            FROM heads n WHERE l.ctid = n.lane
        )
        SELECT nxt.prev, handed.job FROM handed JOIN nxt ON nxt.id = handed.id;
    END IF;

    IF s_route IS NOT NULL THEN
        PERFORM lane_promote(f.route, f.key) FROM unnest(s_route, s_key) AS f(route, key) ORDER BY f.route, f.key;
    END IF;
END $$;

-- lane_job_changed sends a lane job's state change through lanes_advance,
-- in the same transaction, whichever path made it: being a trigger, no
-- path can forget.
CREATE OR REPLACE FUNCTION lane_job_changed() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    -- Look before locking: a job that is not the head cannot become it
    -- while we hold its row (promotion locks the job first), so the
    -- unlocked read is safe, and skipping the lock for non-heads keeps a
    -- cancel of a waiting job from deadlocking with an ingest that holds
    -- the lane and is promoting that very job.
    IF EXISTS (SELECT 1 FROM lanes WHERE route = NEW.route AND key = NEW.key AND head_job_id = NEW.id) THEN
        PERFORM lanes_advance(ARRAY[NEW.id]);
    END IF;
    RETURN NULL;
END $$;

-- The completer ends heads in batches and calls lanes_advance itself in
-- the same transaction; it sets switchyard.lanes_batched for that
-- transaction so that the per-row trigger does not do it a second time
-- row by row (see lanes/doc.go: the two paths are one function, and
-- TestLanePathsAgree holds them equal).
CREATE OR REPLACE TRIGGER jobs_lane_advance AFTER UPDATE OF state ON jobs
    FOR EACH ROW
    WHEN (NEW.lane AND OLD.state IS DISTINCT FROM NEW.state
          AND (NEW.state IN ('succeeded', 'dead', 'cancelled', 'expired', 'skipped', 'coalesced') OR OLD.state = 'dead')
          AND current_setting('switchyard.lanes_batched', true) IS DISTINCT FROM 'on')
    EXECUTE FUNCTION lane_job_changed();

-- lanes_upsert creates the lanes of ordered jobs, or updates their
-- settings when their route's changed: one row per (route, key), in
-- parallel arrays. Lane rows are locked in (route, key) order, so two
-- callers touching the same lanes cannot deadlock; ON CONFLICT DO UPDATE
-- locks the row even when its WHERE leaves it unchanged, and writes only
-- when the settings changed. Ingest calls it per batch, job_enqueue per
-- job: the one definition.
CREATE OR REPLACE FUNCTION lanes_upsert(p_route text[], p_key text[], p_policy text[], p_on_dead text[],
    p_gap_ms bigint[], p_gap_policy text[]) RETURNS void
LANGUAGE sql AS $$
    INSERT INTO lanes AS l (route, key, policy, on_dead, gap_timeout, gap_policy)
    SELECT route, key, policy, on_dead, gap_ms * interval '1 millisecond', gap_policy
    FROM unnest(p_route, p_key, p_policy, p_on_dead, p_gap_ms, p_gap_policy)
        AS u(route, key, policy, on_dead, gap_ms, gap_policy)
    ORDER BY route, key
    ON CONFLICT (route, key) DO UPDATE SET policy = excluded.policy, on_dead = excluded.on_dead,
        gap_timeout = excluded.gap_timeout, gap_policy = excluded.gap_policy
    WHERE (l.policy, l.on_dead, l.gap_timeout, l.gap_policy)
        IS DISTINCT FROM (excluded.policy, excluded.on_dead, excluded.gap_timeout, excluded.gap_policy)
$$;

-- lanes_promote_idle promotes a head in every idle lane named (lanes_upsert
-- made them), in (route, key) order; it looks only at rows that exist.
CREATE OR REPLACE FUNCTION lanes_promote_idle(p_route text[], p_key text[]) RETURNS void
LANGUAGE sql AS $$
    SELECT lane_promote(l.route, l.key)
    FROM lanes l JOIN unnest(p_route, p_key) AS u(route, key) USING (route, key)
    WHERE l.head_job_id IS NULL AND NOT l.blocked
    ORDER BY l.route, l.key
$$;

-- jobs_coalesce ends coalesced the unstarted jobs of each (route, key)
-- named but its newest (coalesce: latest): in a lane's order (version,
-- offset, id) reversed, by ids alone elsewhere, as a key may span
-- partitions. A lane's head is never replaced (it may be running, or
-- about to), nor any started job. It returns the kind of each job it
-- ended, for the metrics.
CREATE OR REPLACE FUNCTION jobs_coalesce(p_route text[], p_key text[]) RETURNS SETOF text
LANGUAGE sql AS $$
    WITH c AS (
        SELECT j.id,
            row_number() OVER (PARTITION BY j.route, j.key ORDER BY
                CASE WHEN j.lane THEN j.version END DESC NULLS LAST,
                CASE WHEN j.lane THEN j.src_offset END DESC NULLS LAST, j.id DESC) AS newest
        FROM unnest(p_route, p_key) AS u(route, key)
        JOIN job_keys k ON k.route = u.route AND k.key = u.key
        JOIN jobs j ON j.id = k.job_id
        WHERE j.state IN ('waiting', 'queued', 'retrying')
          AND NOT EXISTS (SELECT 1 FROM lanes l WHERE l.route = j.route AND l.key = j.key AND l.head_job_id = j.id)
    )
    UPDATE jobs j SET state = 'coalesced', finished_at = now(), lease_expires_at = NULL,
        last_error = 'replaced by a newer record of its key before it started'
    FROM c WHERE j.id = c.id AND c.newest > 1 AND j.state IN ('waiting', 'queued', 'retrying')
    RETURNING j.kind
$$;

-- job_found is job_enqueue's answer for a dedupe key that already made a
-- job in its origin's namespace (no row: it made none): created false,
-- and same_payload, whether the job carries p_payload. The one
-- definition of a retry, for job_enqueue and for the enqueue API's
-- answer when the queue is full (pgstore.JobFindEnqueued).
CREATE OR REPLACE FUNCTION job_found(p_route text, p_origin text, p_dedupe text, p_payload bytea)
RETURNS TABLE (job_id bigint, job_state text, created boolean, same_payload boolean)
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN QUERY SELECT j.id, j.state, false, j.payload = p_payload
        FROM job_keys k, jobs_by_id(ARRAY[k.job_id]) j
        WHERE k.route = p_route AND k.origin = p_origin AND k.dedupe_key = p_dedupe;
END $$;

-- job_enqueue inserts one job that did not come from Kafka (the enqueue
-- API, the Go client, enqueue() below, a schedule), runnable from
-- p_run_at (NULL: now), or finds the job its dedupe key already made in
-- its origin's namespace (I2). A job of an ordered route (p_lane_policy
-- set) joins its key's lane, promoted if the lane is idle: it takes its
-- place by version, after the lane's Kafka records of the same version
-- (it has no offset). With p_coalesce it replaces its key's unstarted
-- jobs. A created job that is runnable wakes its queue at commit
-- (p_channel). same_payload says, for a job found, whether it carries
-- this payload: a key reused for another request is the caller's
-- mistake, not a retry.
CREATE OR REPLACE FUNCTION job_enqueue(p_origin text, p_route text, p_kind text, p_queue text, p_key text, p_version bigint,
    p_dedupe text, p_payload bytea, p_header_keys text[], p_header_values bytea[], p_max_attempts integer,
    p_deadline timestamptz, p_run_at timestamptz, p_lane_policy text, p_on_dead text, p_gap_ms bigint,
    p_gap_policy text, p_grp text, p_coalesce boolean, p_channel text)
RETURNS TABLE (job_id bigint, job_state text, created boolean, same_payload boolean)
LANGUAGE plpgsql AS $$
DECLARE
    v_id    bigint;
    v_state text := CASE WHEN p_lane_policy IS NULL THEN 'queued' ELSE 'waiting' END;
BEGIN
    WITH k AS (
        INSERT INTO job_keys (job_id, route, origin, dedupe_key, key)
        VALUES (nextval('jobs_id_seq'), p_route, p_origin, p_dedupe, p_key)
        ON CONFLICT (route, origin, dedupe_key) DO NOTHING
        RETURNING job_keys.job_id
    )
    INSERT INTO jobs (id, origin, route, kind, queue, state, key, version, dedupe_key, payload,
        header_keys, header_values, max_attempts, deadline, scheduled_at, lane, grp)
    SELECT k.job_id, p_origin, p_route, p_kind, p_queue, v_state, p_key, p_version, p_dedupe, p_payload,
        p_header_keys, p_header_values, p_max_attempts, p_deadline, coalesce(p_run_at, now()),
        p_lane_policy IS NOT NULL, p_grp
    FROM k
    RETURNING jobs.id INTO v_id;
    IF v_id IS NULL THEN
        -- The conflict waited for the row's transaction to end, so this
        -- statement sees it.
        RETURN QUERY SELECT * FROM job_found(p_route, p_origin, p_dedupe, p_payload);
        RETURN;
    END IF;
    IF p_lane_policy IS NOT NULL THEN
        PERFORM lanes_upsert(ARRAY[p_route], ARRAY[p_key], ARRAY[p_lane_policy], ARRAY[p_on_dead],
            ARRAY[p_gap_ms], ARRAY[p_gap_policy]);
        PERFORM lanes_promote_idle(ARRAY[p_route], ARRAY[p_key]);
        SELECT j.state INTO v_state FROM jobs j WHERE j.id = v_id;
    END IF;
    IF p_coalesce AND p_key <> '' THEN
        PERFORM jobs_coalesce(ARRAY[p_route], ARRAY[p_key]);
    END IF;
    IF v_state = 'queued' THEN
        PERFORM pg_notify(p_channel, p_queue);
    END IF;
    RETURN QUERY SELECT v_id, v_state, true, true;
END $$;

-- enqueue is the SQL way in (SPEC §8): any language enqueues a job in its
-- own transaction, which the job exists in if and only if it commits;
-- the queue's idle pools are woken at the commit. Named arguments:
--
--   SELECT * FROM myschema.enqueue(queue => 'bulk', kind => 'invoice.render',
--       payload => convert_to('{"order":42}', 'UTF8'), idempotency_key => 'invoice-42');
--
-- The job takes the settings of the route of its kind in its queue (the
-- routes table, published by the processes at start), is deduplicated by
-- idempotency_key in the API's namespace (a second call finds the first
-- call's job, created false), and a job of an ordered route joins its
-- key's lane: key, and version under a version policy, are arguments
-- here, not read from the payload, and so is a grouped route's group
-- value (group_value), which its group's max_running then counts the job
-- under. Errors name the argument (SQLSTATE 22023), or the queue over its
-- max_depth (53400). It runs with the schema's search_path whatever the
-- caller's (SET ... FROM CURRENT: the one migrate applied it with).
-- The signature it had before group_value.
DROP FUNCTION IF EXISTS enqueue(text, text, bytea, text, text, bigint, timestamptz, text);
CREATE OR REPLACE FUNCTION enqueue(queue text, kind text, payload bytea, idempotency_key text,
    key text DEFAULT NULL, version bigint DEFAULT NULL, run_at timestamptz DEFAULT NULL,
    content_type text DEFAULT NULL, group_value text DEFAULT NULL)
RETURNS TABLE (id bigint, state text, created boolean)
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
#variable_conflict use_column
DECLARE
    r     routes%ROWTYPE;
    v_key text := coalesce($5, '');
    v_at  timestamptz;
    e     record;
BEGIN
    SELECT * INTO r FROM routes WHERE routes.queue = $1 AND routes.kind = $2;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'kind: no route of queue % has kind % (a process publishes its config''s routes at start)', $1, $2
            USING ERRCODE = '22023';
    END IF;
    IF coalesce($4, '') = '' THEN
        RAISE EXCEPTION 'idempotency_key: required: it makes a retried call find its job instead of making another'
            USING ERRCODE = '22023';
    END IF;
    IF octet_length($4) > 1024 OR octet_length(v_key) > 1024 THEN
        RAISE EXCEPTION '%: over the 1024-byte limit of keys', CASE WHEN octet_length($4) > 1024 THEN 'idempotency_key' ELSE 'key' END
            USING ERRCODE = '22023';
    END IF;
    IF r.lane_policy IS NOT NULL AND v_key = '' THEN
        RAISE EXCEPTION 'key: required: route % is ordered, its jobs run in per-key lanes', r.route USING ERRCODE = '22023';
    END IF;
    IF r.lane_policy IN ('newer', 'strict') AND $6 IS NULL THEN
        RAISE EXCEPTION 'version: required: route % orders its lanes by version (%)', r.route, r.lane_policy
            USING ERRCODE = '22023';
    END IF;
    IF r.grouped AND coalesce($9, '') = '' THEN
        RAISE EXCEPTION 'group_value: required: route % caps the running jobs of each group value', r.route
            USING ERRCODE = '22023';
    END IF;
    IF NOT r.grouped AND $9 IS NOT NULL THEN
        RAISE EXCEPTION 'group_value: route % has no group', r.route USING ERRCODE = '22023';
    END IF;
    IF octet_length($9) > 1024 THEN
        RAISE EXCEPTION 'group_value: over the 1024-byte limit of keys' USING ERRCODE = '22023';
    END IF;
    IF $7 > now() + interval '100 years' THEN
        RAISE EXCEPTION 'run_at: % is more than 100 years away', $7 USING ERRCODE = '22023';
    END IF;
    IF r.max_depth > 0 AND (SELECT count(*) FROM (SELECT 1 FROM jobs j WHERE j.queue = $1
            AND j.state IN ('waiting', 'queued', 'retrying') LIMIT r.max_depth) d) >= r.max_depth THEN
        -- A key that made a job is answered as if the queue had room, as
        -- the API answers it: a retried call gets its job.
        SELECT * INTO e FROM job_found(r.route, 'api', $4, coalesce($3, ''::bytea));
        IF NOT FOUND THEN
            RAISE EXCEPTION 'queue % is over its max_depth %; try again later', $1, r.max_depth USING ERRCODE = '53400';
        END IF;
    ELSE
        v_at := CASE WHEN $7 > now() THEN $7 END;
        SELECT * INTO e FROM job_enqueue('api', r.route, $2, $1, v_key, $6, $4, coalesce($3, ''::bytea),
            CASE WHEN $8 IS NULL THEN '{}'::text[] ELSE ARRAY['content-type'] END,
            CASE WHEN $8 IS NULL THEN '{}'::bytea[] ELSE ARRAY[convert_to($8, 'UTF8')] END,
            r.max_attempts, coalesce(v_at, now()) + r.ttl, v_at, r.lane_policy, r.on_dead,
            (extract(epoch FROM r.gap_timeout) * 1000)::bigint, r.gap_policy,
            CASE WHEN r.grouped THEN $9 WHEN r.limited THEN '*' END, -- pgstore.GroupAll: a limited route's one group
            r.coalesce, current_schema() || '_jobs');
    END IF;
    IF NOT e.created AND NOT e.same_payload THEN
        RAISE EXCEPTION 'idempotency_key: % already made job % with a different payload', $4, e.job_id
            USING ERRCODE = '22023';
    END IF;
    RETURN QUERY SELECT e.job_id, e.job_state, e.created;
END $$;

-- offsets_check fails an ingest when fewer of its partitions' stored
-- offsets moved than it advanced (I1's fence: another member stored the
-- range). Raised in the database, so that it rolls the transaction back
-- even where the transaction is one pipelined batch, committed by the
-- server at its end; pgstore maps SY001 to ErrOffsetFenced.
CREATE OR REPLACE FUNCTION offsets_check(p_moved bigint, p_want integer) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF p_moved <> p_want THEN
        RAISE EXCEPTION 'stored offset moved: % of % partitions were at the expected offset', p_moved, p_want
            USING ERRCODE = 'SY001';
    END IF;
END $$;

-- Finished jobs in batches (migration 0029). A job that succeeded outside
-- a lane lives in one row of job_history, among its completion's batch;
-- every other job lives in jobs. Whoever reads a job that may have
-- finished reads it as a job_view, wherever it is kept:
--   jobs_by_id(ids)  the jobs of these ids;
--   all_jobs         every retained job (a view: for operators, tests and
--                    the bench, not for hot paths: it reads every batch).

-- job_as_view is a jobs row as a job_view, with an outcome applied: the
-- one mapping of jobs' columns onto job_view's (job_history_restore maps
-- them back).
--
-- These three, which all_jobs reads through, have SQL-standard bodies
-- (BEGIN ATOMIC): their names are bound when migrate creates them, not
-- looked up in the caller's search_path when they run, so that an
-- operator's `SELECT ... FROM <schema>.all_jobs` works from any session
-- (TestAllJobsAnswersASchemaQualifiedQuery). The planner still inlines
-- job_as_view into the completion's RETURNING, as it did a quoted body.
-- Being bound, they depend on the columns they name: a migration that
-- drops or retypes one drops them first (this file puts them back).
CREATE OR REPLACE FUNCTION job_as_view(j jobs, p_state text, p_finished_at timestamptz, p_result bytea,
    p_result_type text, p_span text) RETURNS job_view
LANGUAGE sql IMMUTABLE
BEGIN ATOMIC
    SELECT ROW(j.id, j.origin, j.route, j.kind, j.queue, p_state, j.key, j.version, j.dedupe_key, j.grp, j.lane,
        j.payload, j.header_keys, j.header_values, j.attempts, j.max_attempts, j.token, j.last_error, j.errors,
        j.created_at, j.scheduled_at, j.deadline, j.started_at, p_finished_at, j.record_at,
        j.src_topic, j.src_partition, j.src_offset, p_result, p_result_type, p_span, j.checkpoint)::job_view;
END;

CREATE OR REPLACE FUNCTION job_as_view(j jobs) RETURNS job_view
LANGUAGE sql IMMUTABLE
BEGIN ATOMIC
    SELECT job_as_view(j, j.state, j.finished_at, j.result, j.result_type, j.attempt_span);
END;

CREATE OR REPLACE FUNCTION jobs_by_id(p_ids bigint[]) RETURNS SETOF job_view
LANGUAGE sql STABLE
BEGIN ATOMIC
    SELECT job_as_view(j) FROM jobs j WHERE j.id = ANY(p_ids)
    UNION ALL
    SELECT r FROM unnest(p_ids) AS w(id) JOIN job_history h ON h.ids @> w.id, unnest(h.jobs) r
    WHERE r.id = w.id;
END;

CREATE OR REPLACE VIEW all_jobs AS
    SELECT (job_as_view(j)).* FROM jobs j
    UNION ALL
    SELECT r.* FROM job_history h, unnest(h.jobs) r;

-- job_history_page is the kept jobs with ids in (p_after, p_until]
-- (p_until NULL: no bound), of queue and route where given, in id order,
-- at most p_limit: JobList's page of job_history. A batch spans the ids
-- of one completion, so batches overlap; the page is read through a
-- window of ids that widens until it holds a whole page or reaches the
-- end, so that a page near the start does not read every batch after it;
-- a batch whose queues or routes do not name the filter's is skipped
-- without decompressing it.
CREATE OR REPLACE FUNCTION job_history_page(p_after bigint, p_until bigint, p_limit integer,
    p_queue text, p_route text) RETURNS SETOF job_view
LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_last  bigint;
    v_width bigint := greatest(p_limit, 1)::bigint * 16;
    v_hi    bigint;
    v_page  job_view[];
BEGIN
    SELECT upper(ids) - 1 INTO v_last FROM job_history ORDER BY upper(ids) DESC LIMIT 1;
    v_last := least(v_last, p_until);
    IF v_last IS NULL OR v_last <= p_after THEN
        RETURN;
    END IF;
    LOOP
        v_hi := CASE WHEN v_last - p_after <= v_width THEN v_last ELSE p_after + v_width END;
        v_page := ARRAY(
            SELECT r FROM job_history h, unnest(h.jobs) r
            WHERE h.ids && int8range(p_after, v_hi, '(]') AND r.id > p_after AND r.id <= v_hi
              AND (p_queue IS NULL OR p_queue = ANY(h.queues)) AND (p_route IS NULL OR p_route = ANY(h.routes))
              AND (p_queue IS NULL OR r.queue = p_queue) AND (p_route IS NULL OR r.route = p_route)
            ORDER BY r.id LIMIT p_limit);
        EXIT WHEN cardinality(v_page) >= p_limit OR v_hi >= v_last;
        v_width := v_width * 8;
    END LOOP;
    RETURN QUERY SELECT * FROM unnest(v_page);
END $$;

-- job_history_restore moves the kept jobs of these ids back into jobs,
-- as they were kept, for a caller that changes them (replay --rerun),
-- and takes them out of their batches.
CREATE OR REPLACE FUNCTION job_history_restore(p_ids bigint[]) RETURNS void
LANGUAGE sql AS $$
    WITH h AS (
        SELECT h.ctid AS batch, r.* FROM job_history h, unnest(h.jobs) r
        WHERE h.ids && CASE WHEN cardinality(p_ids) > 0 THEN
                int8range((SELECT min(x) FROM unnest(p_ids) x), (SELECT max(x) FROM unnest(p_ids) x), '[]')
            ELSE 'empty' END
          AND r.id = ANY(p_ids)
        FOR UPDATE OF h
    ), moved AS (
        INSERT INTO jobs (id, origin, route, kind, queue, state, key, version, dedupe_key, grp, lane,
            payload, header_keys, header_values, attempts, max_attempts, token, last_error, errors,
            created_at, scheduled_at, deadline, started_at, finished_at, record_at,
            src_topic, src_partition, src_offset, result, result_type, attempt_span, checkpoint)
        SELECT id, origin, route, kind, queue, state, key, version, dedupe_key, grp, lane,
            payload, header_keys, header_values, attempts, max_attempts, token, last_error, errors,
            created_at, scheduled_at, deadline, started_at, finished_at, record_at,
            src_topic, src_partition, src_offset, result, result_type, attempt_span, checkpoint
        FROM h
    ), kept AS (
        UPDATE job_history j SET (jobs, n) = (SELECT array_agg(r), count(*) FROM unnest(j.jobs) r WHERE r.id <> ALL(p_ids))
        WHERE j.ctid IN (SELECT batch FROM h)
          AND EXISTS (SELECT 1 FROM unnest(j.jobs) r WHERE r.id <> ALL(p_ids))
    )
    DELETE FROM job_history j WHERE j.ctid IN (SELECT batch FROM h)
        AND NOT EXISTS (SELECT 1 FROM unnest(j.jobs) r WHERE r.id <> ALL(p_ids))
$$;
