package pgstore

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
)

// Groups is what QueueStats needs of a config's group caps
// (config.Groups). A queued job of a group that already runs its cap's
// worth is held behind its group's head, as a lane's waiting job is
// behind its lane's: SPEC §7 counts it in the oldest waiting age, not
// the runnable one, which would otherwise grow with one tenant's flood
// held at its cap while the queue's workers are free for the others. The
// job stays queued in the depth: a group's cap is kept by the counted
// claim (internal/flow/doc.go), which writes no job row when a group
// fills or frees.
type Groups struct {
	// Routes are the routes with a group: each one's queue and cap.
	Routes map[string]GroupRoute
	// Only are the queues that only routes with a group feed.
	Only map[string]bool
}

// GroupRoute is a grouped route's queue and its group's max_running.
type GroupRoute struct {
	Queue string
	Cap   int
}

// held is what heldGroups found: the groups at their cap, and the age of
// the oldest job each queue holds in them that could run but for the
// cap (a queue appears only when it holds one).
type held struct {
	groups     map[[2]string]bool // {route, group}
	waitingAge map[string]float64
}

// heldGroups finds the groups at their cap by the running index: it
// reads the fleet's running jobs of grouped routes, whatever the backlog.
// Each held group's oldest runnable job is then one descent of the group
// index.
func (s *Store) heldGroups(ctx context.Context, g Groups) (held, error) {
	h := held{groups: map[[2]string]bool{}, waitingAge: map[string]float64{}}
	if len(g.Routes) == 0 {
		return h, nil
	}
	routes, caps := make([]string, 0, len(g.Routes)), make([]int32, 0, len(g.Routes))
	for r, gr := range g.Routes {
		routes, caps = append(routes, r), append(caps, int32(gr.Cap))
	}
	rows, err := s.pool.Query(ctx, `
		WITH h AS (
			SELECT j.route, j.grp FROM jobs j JOIN unnest($1::text[], $2::int[]) c(route, cap) ON j.route = c.route
			WHERE j.state = 'running' AND j.grp IS NOT NULL
			GROUP BY j.route, j.grp, c.cap HAVING count(*) >= c.cap
		)
		SELECT h.route, h.grp, o.queue, extract(epoch FROM now() - o.scheduled_at)::float8
		FROM h LEFT JOIN LATERAL (
			SELECT queue, scheduled_at FROM jobs j
			WHERE j.route = h.route AND j.grp = h.grp AND j.state IN ('queued', 'retrying') AND j.scheduled_at <= now()
			ORDER BY j.scheduled_at LIMIT 1
		) o ON true`, routes, caps)
	if err != nil {
		return h, err
	}
	var route, group string
	var queue *string
	var age *float64
	_, err = pgx.ForEachRow(rows, []any{&route, &group, &queue, &age}, func() error {
		h.groups[[2]string{route, group}] = true
		if queue != nil && age != nil {
			h.waitingAge[*queue] = max(h.waitingAge[*queue], *age)
		}
		return nil
	})
	return h, err
}

// heldWindow is how many of a queue's oldest runnable jobs
// runnableBesideHeld reads for one that no cap holds. Each is a row read
// (the claim index has no group), so a flood held at its cap is not read
// whole every few seconds.
const heldWindow = 1000

// runnableBesideHeld is the age of queue's oldest runnable job that no
// group's cap holds, 0 when none. Among the heldWindow oldest it is
// exact. Past them, a queue that only grouped routes feed is answered by
// its groups, one descent of the group index for each group with jobs
// (the held ones left out); any other queue by the heldWindow-th job's
// age, which no job behind it can be older than: the age may then read
// high, never low.
func (s *Store) runnableBesideHeld(ctx context.Context, queue string, g Groups, h held) (float64, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT route, coalesce(grp, ''), grp IS NOT NULL, extract(epoch FROM now() - scheduled_at)::float8 FROM jobs
		WHERE queue = $1 AND state IN ('queued', 'retrying') AND scheduled_at <= now()
		ORDER BY scheduled_at, id LIMIT $2`, queue, heldWindow)
	if err != nil {
		return 0, err
	}
	var route, group string
	var grouped bool
	var age, last float64
	n := 0
	_, err = pgx.ForEachRow(rows, []any{&route, &group, &grouped, &age}, func() error {
		n, last = n+1, age
		if !(grouped && h.groups[[2]string{route, group}]) {
			return errFound // the rest is not needed
		}
		return nil
	})
	switch {
	case errors.Is(err, errFound):
		return age, nil
	case err != nil:
		return 0, err
	case n < heldWindow:
		return 0, nil // every runnable job is held
	case !g.Only[queue]:
		return last, nil
	}
	oldest := 0.0
	for r, gr := range g.Routes {
		if gr.Queue != queue {
			continue
		}
		a, whole, err := s.oldestUnheldGroup(ctx, r, h)
		if err != nil || !whole {
			return last, err
		}
		oldest = max(oldest, a)
	}
	return oldest, nil
}

// heldGroupWalk bounds oldestUnheldGroup's walk: a route with more groups
// than that waiting is answered conservatively.
const heldGroupWalk = 10_000

// oldestUnheldGroup is the age of route's oldest runnable job in a group
// not at its cap, 0 when none, walking the route's groups one descent of
// the group index each; whole is false when there were more than
// heldGroupWalk of them and the walk stopped.
func (s *Store) oldestUnheldGroup(ctx context.Context, route string, h held) (age float64, whole bool, err error) {
	heldHere := []string{}
	for k := range h.groups {
		if k[0] == route {
			heldHere = append(heldHere, k[1])
		}
	}
	err = s.pool.QueryRow(ctx, `
		WITH RECURSIVE g(grp, n) AS (
			(SELECT grp, 1 FROM jobs WHERE route = $1 AND state IN ('queued', 'retrying') AND grp IS NOT NULL
				ORDER BY grp LIMIT 1)
			UNION ALL
			SELECT (SELECT j.grp FROM jobs j WHERE j.route = $1 AND j.state IN ('queued', 'retrying') AND j.grp IS NOT NULL
				AND j.grp > g.grp ORDER BY j.grp LIMIT 1), g.n + 1
			FROM g WHERE g.grp IS NOT NULL AND g.n < $3
		)
		SELECT coalesce(max(extract(epoch FROM now() - o.scheduled_at)), 0)::float8,
			(SELECT count(*) = 0 OR bool_or(grp IS NULL) FROM g)
		FROM g CROSS JOIN LATERAL (
			SELECT scheduled_at FROM jobs j
			WHERE j.route = $1 AND j.grp = g.grp AND j.state IN ('queued', 'retrying') AND j.scheduled_at <= now()
			ORDER BY j.scheduled_at LIMIT 1
		) o
		WHERE g.grp IS NOT NULL AND g.grp <> ALL($2::text[])`, route, heldHere, heldGroupWalk).Scan(&age, &whole)
	return age, whole, err
}

// errFound ends a row loop early.
var errFound = errors.New("found")
