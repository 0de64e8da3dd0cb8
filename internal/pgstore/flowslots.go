package pgstore

import (
	"cmp"
	"context"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
)

// SlotAsk is one route's part of a FlowSlotsLease: the route's
// max_running (Cap), how many of its slots the process would use
// (Want), and how many its handlers use now (InUse).
type SlotAsk struct {
	Route            string
	Cap, Want, InUse int
}

// FlowSlotsLease renews a process's (holder's) shares of its routes'
// max_running (migration 0023, internal/flow/doc.go) for ttl, and returns
// the number of slots of each route the holder may use, until ttl after
// it asked: a row expires ttl after the transaction's start, which comes
// after the asking, whatever the clocks say. One round trip, one implicit transaction: the routes'
// advisory locks, in route order, so that no two holders compute a
// route's free slots at once; then, per route, its share:
//
//   - free is max_running minus the live shares of the other holders
//     (a share whose row expired counts no more: its holder is gone);
//   - the share is at most Want and free, and, while other holders want
//     slots too, at most an even split of max_running — unless what
//     those others want leaves it more;
//   - the row keeps at least InUse: slots in use stay counted until
//     their handlers return, so a share that shrinks does so only as the
//     holder's handlers end, never under them.
//
// Expired rows are deleted on the way.
func (s *Store) FlowSlotsLease(ctx context.Context, holder string, asks []SlotAsk, ttl time.Duration) (map[string]int, error) {
	asks = slices.SortedFunc(slices.Values(asks), func(a, b SlotAsk) int { return cmp.Compare(a.Route, b.Route) })
	n := len(asks)
	routes, keys := make([]string, n), make([]string, n)
	caps, wants, inUse := make([]int32, n), make([]int32, n), make([]int32, n)
	for i, a := range asks {
		routes[i], keys[i] = a.Route, s.flowLockKey(a.Route)
		caps[i], wants[i], inUse[i] = int32(a.Cap), int32(max(a.Want, a.InUse)), int32(a.InUse)
	}
	out := make(map[string]int, n)
	if n == 0 {
		return out, nil
	}
	b := &pgx.Batch{}
	b.Queue(`SELECT count(pg_advisory_xact_lock(hashtext(k))) FROM unnest($1::text[]) k`, keys)
	b.Queue(flowSlotsLeaseSQL, holder, routes, caps, wants, inUse, ttl.Milliseconds()).Query(func(rows pgx.Rows) error {
		var route string
		var slots int
		_, err := pgx.ForEachRow(rows, []any{&route, &slots}, func() error { out[route] = slots; return nil })
		return err
	})
	if err := s.pool.SendBatch(ctx, b).Close(); err != nil {
		return nil, err
	}
	return out, nil
}

// flowSlotsLeaseSQL is FlowSlotsLease's statement: $1 holder, $2..$5
// route, max_running, want and in use per route, $6 ttl (ms).
const flowSlotsLeaseSQL = `
	WITH a AS (
		SELECT * FROM unnest($2::text[], $3::int[], $4::int[], $5::int[]) AS a(route, cap, want, in_use)
	), o AS (
		SELECT a.*,
			coalesce(sum(f.slots), 0)::int AS others,
			coalesce(sum(f.wants), 0)::int AS others_want,
			count(*) FILTER (WHERE f.wants > 0)::int AS others_asking
		FROM a LEFT JOIN flow_slots f ON f.route = a.route AND f.holder <> $1 AND f.expires_at > now()
		GROUP BY a.route, a.cap, a.want, a.in_use
	), g AS (
		SELECT route, want, in_use,
			greatest(0, least(want, cap - others,
				greatest(ceil(cap::numeric / (others_asking + 1))::int, cap - others_want)))::int AS share
		FROM o
	), up AS (
		INSERT INTO flow_slots AS f (route, holder, slots, wants, expires_at)
		SELECT route, $1, greatest(share, in_use), want, now() + $6::bigint * interval '1 millisecond' FROM g
		ON CONFLICT (route, holder) DO UPDATE
		SET slots = excluded.slots, wants = excluded.wants, expires_at = excluded.expires_at
	), gone AS (
		DELETE FROM flow_slots WHERE expires_at < now() AND route = ANY($2::text[])
	)
	SELECT route, share FROM g`

// FlowSlotsRelease gives back a holder's shares of every route (at its
// stop, once no handler of it runs).
func (s *Store) FlowSlotsRelease(ctx context.Context, holder string) error {
	_, err := s.pool.Exec(ctx, `DELETE FROM flow_slots WHERE holder = $1`, holder)
	return err
}

// flowLockKey is the advisory lock of a route's flow limits, held by its
// counted claims (claimLimited) and its slot leases.
func (s *Store) flowLockKey(route string) string { return s.schema + "/flow/" + route }
