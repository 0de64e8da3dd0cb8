package pgstore

import (
	"context"
	"slices"
)

// ReservationsPut records how many claimed-but-unstarted jobs a process
// holds in each queue, replacing what it said before.
func (s *Store) ReservationsPut(ctx context.Context, process string, reserved map[string]int) error {
	queues := make([]string, 0, len(reserved))
	for q := range reserved {
		queues = append(queues, q)
	}
	slices.Sort(queues)
	counts := make([]int32, len(queues))
	for i, q := range queues {
		counts[i] = int32(reserved[q])
	}
	_, err := s.pool.Exec(ctx, `
		INSERT INTO reservations AS r (process, queue, reserved)
		SELECT $1, q, n FROM unnest($2::text[], $3::int[]) AS u(q, n)
		ON CONFLICT (process, queue) DO UPDATE SET reserved = excluded.reserved, updated_at = now()`,
		process, queues, counts)
	return err
}

// ReservationsDrop removes a process's reservations (at its stop).
func (s *Store) ReservationsDrop(ctx context.Context, process string) error {
	_, err := s.pool.Exec(ctx, `DELETE FROM reservations WHERE process = $1`, process)
	return err
}

// reservationsFresh is how long a process's reservations count without
// a refresh: a process that stopped refreshing them is gone, and its
// jobs' leases expire soon after.
const reservationsFresh = "15 seconds"
