package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"

	"github.com/switchyard-dev/switchyard/internal/pgstore"
	"github.com/switchyard-dev/switchyard/internal/testenv"
)

// splitJobs makes jobs for records from..to of topic t's partition p, one
// a record per route.
func splitJobs(p int32, from, to int64, routes ...string) []pgstore.NewJob {
	var jobs []pgstore.NewJob
	for o := from; o < to; o++ {
		for _, r := range routes {
			jobs = append(jobs, pgstore.NewJob{Route: r, Kind: "k", Queue: "q", DedupeKey: fmt.Sprintf("%d/%d", p, o),
				Payload: []byte("{}"), MaxAttempts: 3, Topic: "t", Partition: p, Offset: o})
		}
	}
	return jobs
}

// IngestSplit cuts a batch in the middle, a record's jobs together; the
// partition cut in two advances to the cut in the first half and on from
// there in the second, the others (with their poison) go whole to the half
// that holds their jobs; and a batch whose halves could wait for each
// other's locks, or that is small, is not split.
func TestIngestSplit(t *testing.T) {
	t.Parallel()
	s := testenv.MigratedStore(t)
	type adv = pgstore.OffsetAdvance
	poison := func(p int32, o int64) pgstore.Poison {
		return pgstore.Poison{Topic: "t", Partition: p, Offset: o, Route: "a"}
	}
	concat := func(parts ...[]pgstore.NewJob) []pgstore.NewJob {
		var out []pgstore.NewJob
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}
	type half struct {
		jobs    int
		offsets []adv
		poison  []int64 // offsets of its poison entries
	}
	for _, tc := range []struct {
		name          string
		batch         pgstore.IngestBatch
		first, second half // both zero: not split
	}{{
		name: "one partition, cut in the middle",
		batch: pgstore.IngestBatch{Jobs: splitJobs(0, 100, 3100, "a"),
			Offsets: []adv{{Topic: "t", Partition: 0, Expected: 100, Next: 3105}},
			Poison:  []pgstore.Poison{poison(0, 1599), poison(0, 1600), poison(0, 3102)}},
		first:  half{1500, []adv{{Topic: "t", Partition: 0, Expected: 100, Next: 1600}}, []int64{1599}},
		second: half{1500, []adv{{Topic: "t", Partition: 0, Expected: 1600, Next: 3105}}, []int64{1600, 3102}},
	}, {
		name: "a record's jobs stay together",
		batch: pgstore.IngestBatch{Jobs: splitJobs(0, 0, 1001, "a", "b", "c"),
			Offsets: []adv{{Topic: "t", Partition: 0, Expected: 0, Next: 1001}}},
		// 3003 jobs: the middle, 1501, is the record 500's second job.
		first:  half{1500, []adv{{Topic: "t", Partition: 0, Expected: 0, Next: 500}}, nil},
		second: half{1503, []adv{{Topic: "t", Partition: 0, Expected: 500, Next: 1001}}, nil},
	}, {
		name: "the partition cut in two has no stored offset yet",
		batch: pgstore.IngestBatch{Jobs: splitJobs(0, 0, 3000, "a"),
			Offsets: []adv{{Topic: "t", Partition: 0, Expected: -1, Next: 3000}}},
	}, {
		name: "a partition new to the store on one side of the cut",
		batch: pgstore.IngestBatch{Jobs: concat(splitJobs(0, 0, 1500, "a"), splitJobs(1, 0, 1500, "a")),
			Offsets: []adv{{Topic: "t", Partition: 0, Expected: -1, Next: 1500}, {Topic: "t", Partition: 1, Expected: -1, Next: 1500}}},
		first:  half{1500, []adv{{Topic: "t", Partition: 0, Expected: -1, Next: 1500}}, nil},
		second: half{1500, []adv{{Topic: "t", Partition: 1, Expected: -1, Next: 1500}}, nil},
	}, {
		name: "whole partitions on either side of the cut",
		batch: pgstore.IngestBatch{Jobs: concat(splitJobs(0, 0, 1200, "a"), splitJobs(1, 0, 1800, "a"), splitJobs(2, 0, 1000, "a")),
			Offsets: []adv{{Topic: "t", Partition: 3, Expected: 7, Next: 9},
				{Topic: "t", Partition: 0, Expected: 0, Next: 1200}, {Topic: "t", Partition: 1, Expected: 0, Next: 1800},
				{Topic: "t", Partition: 2, Expected: 0, Next: 1000}},
			Poison: []pgstore.Poison{poison(3, 8), poison(2, 1000)}},
		first: half{2000, []adv{{Topic: "t", Partition: 3, Expected: 7, Next: 9},
			{Topic: "t", Partition: 0, Expected: 0, Next: 1200}, {Topic: "t", Partition: 1, Expected: 0, Next: 800}}, []int64{8}},
		second: half{2000, []adv{{Topic: "t", Partition: 1, Expected: 800, Next: 1800},
			{Topic: "t", Partition: 2, Expected: 0, Next: 1000}}, []int64{1000}},
	}, {
		name: "few jobs of large payloads, cut by their bytes",
		batch: func() pgstore.IngestBatch {
			b := pgstore.IngestBatch{Jobs: splitJobs(0, 0, 30, "a"), Offsets: []adv{{Topic: "t", Expected: 0, Next: 30}}}
			for i := range b.Jobs {
				b.Jobs[i].Payload = make([]byte, 100<<10)
				if i < 10 {
					b.Jobs[i].Payload = make([]byte, 210<<10) // the first ten weigh a little more than the next twenty
				}
			}
			return b
		}(),
		first:  half{10, []adv{{Topic: "t", Expected: 0, Next: 10}}, nil},
		second: half{20, []adv{{Topic: "t", Expected: 10, Next: 30}}, nil},
	}, {
		name: "few jobs of small payloads",
		batch: func() pgstore.IngestBatch {
			b := pgstore.IngestBatch{Jobs: splitJobs(0, 0, 30, "a"), Offsets: []adv{{Topic: "t", Expected: 0, Next: 30}}}
			for i := range b.Jobs {
				b.Jobs[i].Payload = make([]byte, 60<<10) // 900 KiB a half
			}
			return b
		}(),
	}, {
		name:  "too small",
		batch: pgstore.IngestBatch{Jobs: splitJobs(0, 0, 1999, "a"), Offsets: []adv{{Topic: "t", Expected: 0, Next: 1999}}},
	}, {
		name: "an ordered route's job",
		batch: func() pgstore.IngestBatch {
			b := pgstore.IngestBatch{Jobs: splitJobs(0, 0, 3000, "a"), Offsets: []adv{{Topic: "t", Expected: 0, Next: 3000}}}
			b.Jobs[2999].Lane = &pgstore.LanePolicy{Policy: "none"}
			return b
		}(),
	}, {
		name: "a coalescing route's job",
		batch: func() pgstore.IngestBatch {
			b := pgstore.IngestBatch{Jobs: splitJobs(0, 0, 3000, "a"), Offsets: []adv{{Topic: "t", Expected: 0, Next: 3000}}}
			b.Jobs[0].Coalesce = true
			return b
		}(),
	}, {
		name: "a dedupe key in both halves",
		batch: func() pgstore.IngestBatch {
			b := pgstore.IngestBatch{Jobs: splitJobs(0, 0, 3000, "a"), Offsets: []adv{{Topic: "t", Expected: 0, Next: 3000}}}
			b.Jobs[2999].DedupeKey = b.Jobs[0].DedupeKey
			return b
		}(),
	}, {
		name: "a partition's records out of order across the cut",
		batch: pgstore.IngestBatch{Jobs: concat(splitJobs(0, 1000, 2000, "a"), splitJobs(0, 0, 1000, "a")),
			Offsets: []adv{{Topic: "t", Partition: 0, Expected: 0, Next: 2000}}},
	}, {
		name: "two partitions in both halves",
		batch: pgstore.IngestBatch{Jobs: concat(splitJobs(0, 0, 1000, "a"), splitJobs(1, 0, 1000, "a"), splitJobs(0, 1000, 1500, "a"), splitJobs(1, 1000, 1500, "a")),
			Offsets: []adv{{Topic: "t", Partition: 0, Expected: 0, Next: 1500}, {Topic: "t", Partition: 1, Expected: 0, Next: 1500}}},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			first, second, ok := s.IngestSplit(tc.batch)
			if want := tc.first.jobs > 0; ok != want {
				t.Fatalf("split %v, want %v", ok, want)
			}
			if !ok {
				return
			}
			for _, c := range []struct {
				name string
				got  pgstore.IngestBatch
				want half
			}{{"first", first, tc.first}, {"second", second, tc.second}} {
				var poison []int64
				for _, p := range c.got.Poison {
					poison = append(poison, p.Offset)
				}
				if len(c.got.Jobs) != c.want.jobs || !reflect.DeepEqual(c.got.Offsets, c.want.offsets) || !reflect.DeepEqual(poison, c.want.poison) {
					t.Errorf("%s half: %d jobs, offsets %+v, poison at %v; want %d, %+v, %v",
						c.name, len(c.got.Jobs), c.got.Offsets, poison, c.want.jobs, c.want.offsets, c.want.poison)
				}
			}
			if len(first.Jobs)+len(second.Jobs) != len(tc.batch.Jobs) || &first.Jobs[0] != &tc.batch.Jobs[0] {
				t.Error("the halves are not the batch's jobs, in order")
			}
		})
	}
	t.Run("a small pool", func(t *testing.T) {
		small, err := pgstore.Open(context.Background(), pgstore.Config{URL: testenv.DatabaseURL(t), Schema: "public", MaxConns: 3})
		if err != nil {
			t.Fatal(err)
		}
		defer small.Close()
		b := pgstore.IngestBatch{Jobs: splitJobs(0, 0, 3000, "a"), Offsets: []adv{{Topic: "t", Expected: 0, Next: 3000}}}
		if _, _, ok := small.IngestSplit(b); ok {
			t.Fatal("split for a pool of 3 connections, whose second half could hold the one its first needs")
		}
	})
}

// The second half of a split batch commits only after the first: while
// the first half's transaction holds the partition they share (here a
// transaction of the test's, doing to the offsets row what the first
// half does), the second's rows stay invisible and the offset unmoved.
// When the first half stores the split point, the second commits; when
// another member moves the offset instead, the second is refused, and
// nothing of it is stored.
func TestIngestSplitSecondHalfWaitsForTheFirst(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, fenced := range []bool{false, true} {
		t.Run(fmt.Sprintf("first fenced %v", fenced), func(t *testing.T) {
			t.Parallel()
			s := testenv.MigratedStore(t)
			b := pgstore.IngestBatch{Group: "g", Jobs: splitJobs(0, 0, 3000, "a"),
				Offsets: []pgstore.OffsetAdvance{{Topic: "t", Expected: 0, Next: 3000}}}
			if _, err := s.Pool().Exec(ctx, `INSERT INTO kafka_offsets (group_id, topic, partition, next_offset) VALUES ('g', 't', 0, 0)`); err != nil {
				t.Fatal(err)
			}
			_, second, ok := s.IngestSplit(b)
			if !ok || !second.Continues {
				t.Fatalf("split %v, second half continues %v", ok, second.Continues)
			}
			tx, err := s.Pool().Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(ctx)
			if _, err := tx.Exec(ctx, `UPDATE kafka_offsets SET updated_at = now() WHERE topic = 't'`); err != nil {
				t.Fatal(err)
			}
			secondErr := make(chan error, 1)
			go func() {
				_, err := s.IngestCommit(ctx, second)
				secondErr <- err
			}()
			testenv.WaitBlockedBy(t, s, tx, "the second half waiting on the offsets row")
			if jobs, next := testenv.Count(t, s, `SELECT count(*) FROM jobs`),
				testenv.Count(t, s, `SELECT next_offset FROM kafka_offsets WHERE topic = 't'`); jobs != 0 || next != 0 {
				t.Fatalf("with the second half waiting for the first: %d jobs, stored offset %d; want 0, 0", jobs, next)
			}
			at := int64(1500) // the split point
			if fenced {
				at = 5 // another member's store
			}
			if _, err := tx.Exec(ctx, `UPDATE kafka_offsets SET next_offset = $1 WHERE topic = 't'`, at); err != nil {
				t.Fatal(err)
			}
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			err = <-secondErr
			jobs, next := testenv.Count(t, s, `SELECT count(*) FROM jobs`),
				testenv.Count(t, s, `SELECT next_offset FROM kafka_offsets WHERE topic = 't'`)
			switch {
			case fenced && !errors.Is(err, pgstore.ErrOffsetFenced):
				t.Fatalf("second half: %v after another member moved the offset; want it fenced", err)
			case fenced && (jobs != 0 || next != 5):
				t.Fatalf("%d jobs, stored offset %d; want 0, 5", jobs, next)
			case !fenced && err != nil:
				t.Fatalf("second half not stored: %v", err)
			case !fenced && (jobs != 1500 || next != 3000):
				t.Fatalf("%d jobs, stored offset %d; want 1500, 3000", jobs, next)
			}
		})
	}
}

// I6 across the halves: a batch's poison records are parked by the half
// that holds their partition's records (of the partition cut in two, by
// which side of the cut they are on), and the halves, stored in turn,
// store every job and every poison entry and move the offset to the end.
func TestIngestSplitHalvesParkTheirPoison(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := testenv.MigratedStore(t)
	if _, err := s.Pool().Exec(ctx, `INSERT INTO kafka_offsets (group_id, topic, partition, next_offset) VALUES ('g', 't', 0, 0)`); err != nil {
		t.Fatal(err)
	}
	// Records 0..3003 of partition 0: jobs, but for poison at 10, 2000 and 3003.
	b := pgstore.IngestBatch{Group: "g", Offsets: []pgstore.OffsetAdvance{{Topic: "t", Expected: 0, Next: 3004}}}
	for _, j := range splitJobs(0, 0, 3004, "a") {
		if j.Offset == 10 || j.Offset == 2000 || j.Offset == 3003 {
			b.Poison = append(b.Poison, pgstore.Poison{Reason: "decode", Route: "a", Queue: "q", Error: "not JSON",
				Topic: "t", Offset: j.Offset})
			continue
		}
		b.Jobs = append(b.Jobs, j)
	}
	first, second, ok := s.IngestSplit(b)
	if !ok || len(first.Poison) != 1 || len(second.Poison) != 2 {
		t.Fatalf("split %v, poison %d and %d; want 1 and 2", ok, len(first.Poison), len(second.Poison))
	}
	for _, half := range []pgstore.IngestBatch{first, second} {
		if _, err := s.IngestCommit(ctx, half); err != nil {
			t.Fatal(err)
		}
	}
	jobs, parked := testenv.Count(t, s, `SELECT count(*) FROM jobs`), testenv.Count(t, s, `SELECT count(*) FROM dlq_entries`)
	next := testenv.Count(t, s, `SELECT next_offset FROM kafka_offsets WHERE topic = 't'`)
	if jobs != 3001 || parked != 3 || next != 3004 {
		t.Fatalf("%d jobs, %d parked, stored offset %d; want 3001, 3, 3004", jobs, parked, next)
	}
}
