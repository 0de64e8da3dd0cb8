package pgstore

import (
	"context"
	"slices"

	"github.com/jackc/pgx/v5"
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

// QueueFlowPut publishes a process's counts of the jobs that arrived in
// and finished from each queue since it started (metrics.QueueFlow),
// replacing what it said before, and drops the rows of processes gone
// for a day.
func (s *Store) QueueFlowPut(ctx context.Context, process string, arrived, finished map[string]int64) error {
	var queues []string
	for q := range arrived {
		queues = append(queues, q)
	}
	for q := range finished {
		if _, ok := arrived[q]; !ok {
			queues = append(queues, q)
		}
	}
	slices.Sort(queues)
	a, f := make([]int64, len(queues)), make([]int64, len(queues))
	for i, q := range queues {
		a[i], f[i] = arrived[q], finished[q]
	}
	batch := &pgx.Batch{}
	batch.Queue(`INSERT INTO queue_flow (process, queue, arrived, finished)
		SELECT $1, q, a, f FROM unnest($2::text[], $3::bigint[], $4::bigint[]) AS u(q, a, f)
		ON CONFLICT (process, queue) DO UPDATE SET arrived = excluded.arrived, finished = excluded.finished, updated_at = now()`,
		process, queues, a, f)
	batch.Queue(`DELETE FROM queue_flow WHERE updated_at < now() - interval '1 day'`)
	return s.pool.SendBatch(ctx, batch).Close()
}

// OutcomeTallyTake takes the ends that SQL tallied (migration 0025) since
// any process last took them, summed by kind and outcome. Each row is
// taken once, by whichever process's statement deletes it.
func (s *Store) OutcomeTallyTake(ctx context.Context) (map[[2]string]int64, error) {
	rows, err := s.pool.Query(ctx, `DELETE FROM outcome_tally RETURNING kind, outcome, n`)
	if err != nil {
		return nil, err
	}
	var kind, outcome string
	var n int64
	ends := map[[2]string]int64{}
	_, err = pgx.ForEachRow(rows, []any{&kind, &outcome, &n}, func() error {
		ends[[2]string{kind, outcome}] += n
		return nil
	})
	return ends, err
}
