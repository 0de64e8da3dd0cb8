package pgstore_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/switchyard-dev/switchyard/internal/pgstore"
	"github.com/switchyard-dev/switchyard/internal/testenv"
)

// A lane whose settings an ingest writes while the lane's head ends
// still advances. Two configs of a route that differ in a lane setting
// (a rolling deploy of a changed gap_timeout) make every ingest into a
// lane write its row; lanes_advance, which locked the lanes of the heads
// it ends in a statement that also read those heads from jobs, lost the
// lane in the lock's re-check of its newest version, and the lane kept
// its gone head for good: its later jobs never ran.
func TestLaneAdvancesBesideASettingsChange(t *testing.T) {
	t.Parallel()
	raceLanes(t, false)
}

// Pruning idle lanes runs beside everything that adds jobs to lanes and
// ends them; whatever the interleaving, no job is left waiting in a lane
// with no row or no head to promote it.
func TestPruningBesideIngestLosesNoJob(t *testing.T) {
	t.Parallel()
	raceLanes(t, true)
}

// raceLanes runs, at once: two ingesters storing batches into the same
// 16 keys, each under its own gap_timeout (so each batch writes its lanes'
// rows); a worker claiming and ending what is runnable; with prune, a
// re-run of finished jobs (lane_promote) and a pruner going over the
// lanes. Every job must end, and none be left in jobs.
func raceLanes(t *testing.T, prune bool) {
	ctx := context.Background()
	s := testenv.MigratedStore(t)
	const keys, batches = 16, 80
	ingest := func(w int) error {
		lane := &pgstore.LanePolicy{Policy: "none", OnDead: "continue", GapTimeout: time.Duration(w+1) * time.Minute, GapPolicy: "park"}
		for b := range batches {
			var batch pgstore.IngestBatch
			for k := range keys {
				if (k+b+w)%4 != 0 {
					continue // each key gets a job every fourth batch: its lane goes idle between
				}
				batch.Jobs = append(batch.Jobs, pgstore.NewJob{Route: "r", Kind: "k", Queue: "q", Key: fmt.Sprint("k", k),
					DedupeKey: fmt.Sprint(w, "-", b, "-", k), Payload: []byte("{}"), MaxAttempts: 3, Topic: "t",
					Offset: int64(b), Lane: lane})
			}
			if _, err := s.IngestCommit(ctx, batch); err != nil {
				return err
			}
			time.Sleep(time.Duration(b%3) * time.Millisecond)
		}
		return nil
	}
	work := func() (int, error) {
		jobs, _, err := s.JobClaim(ctx, pgstore.JobClaimParams{Queue: "q", Limit: keys, Lease: time.Minute, MaxRuntime: time.Hour})
		if err != nil || len(jobs) == 0 {
			return 0, err
		}
		outcomes := make([]pgstore.Outcome, len(jobs))
		for i, j := range jobs {
			outcomes[i] = pgstore.Outcome{ID: j.ID, Token: j.Token, State: "succeeded", Lane: j.LaneRef()}
		}
		_, err = s.JobComplete(ctx, outcomes)
		return len(jobs), err
	}
	ingested := make(chan struct{})
	// until runs f until the ingesters are done.
	until := func(f func() error) func() error {
		return func() error {
			for {
				select {
				case <-ingested:
					return nil
				default:
				}
				if err := f(); err != nil {
					return err
				}
			}
		}
	}
	var g errgroup.Group
	g.Go(func() error {
		defer close(ingested)
		var in errgroup.Group
		in.Go(func() error { return ingest(0) })
		in.Go(func() error { return ingest(1) })
		return in.Wait()
	})
	g.Go(until(func() error { _, err := work(); return err }))
	var pruned, reruns atomic.Int64
	if prune {
		b := 0
		g.Go(until(func() error {
			var ids []string
			for k := range keys {
				ids = append(ids, fmt.Sprint(0, "-", b%batches, "-", k))
			}
			b++
			n, err := s.JobRerun(ctx, "r", ids)
			reruns.Add(n)
			return err
		}))
		var after pgstore.LaneKey
		g.Go(until(func() error {
			next, n, _, err := s.LanePrune(ctx, after, 5, 0)
			pruned.Add(n)
			after = pgstore.LaneKey{}
			if next != nil {
				after = *next
			}
			return err
		}))
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	for {
		n, err := work()
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
	}
	var left, done int
	if err := s.Pool().QueryRow(ctx, `SELECT (SELECT count(*) FROM jobs WHERE route = 'r'),
		(SELECT count(*) FROM all_jobs WHERE route = 'r' AND state = 'succeeded')`).Scan(&left, &done); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d jobs succeeded, %d left in jobs; %d lanes pruned and %d jobs re-run on the way", done, left, pruned.Load(), reruns.Load())
	if want := 2 * batches * keys / 4; left != 0 || done != want {
		var stuck string
		_ = s.Pool().QueryRow(ctx, `SELECT coalesce(string_agg(DISTINCT format('%s (head %s)', j.key, coalesce(l.head_job_id::text, 'none')), ', '), '')
			FROM jobs j LEFT JOIN lanes l ON l.route = j.route AND l.key = j.key WHERE j.route = 'r'`).Scan(&stuck)
		t.Fatalf("%d of %d jobs succeeded, %d left unfinished in lanes %s", done, want, left, stuck)
	}
}
