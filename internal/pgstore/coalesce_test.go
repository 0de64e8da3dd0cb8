package pgstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/internal/pgstore"
	"github.com/switchyard-dev/switchyard/internal/testenv"
)

// coalesce: latest keeps a key's newest unstarted job: the older ones end
// coalesced, a job that started is never replaced, jobs with an empty key
// are left alone, and in a lane the head holds while its waiting jobs
// collapse to the last in lane order.
func TestCoalesceKeepsTheNewestUnstartedJobOfAKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := testenv.MigratedStore(t)
	lane := &pgstore.LanePolicy{Policy: "none", OnDead: "continue", GapTimeout: time.Minute, GapPolicy: "park"}
	offset := int64(0)
	ingest := func(route, key string, l *pgstore.LanePolicy, n int) {
		t.Helper()
		var b pgstore.IngestBatch
		for range n {
			offset++
			b.Jobs = append(b.Jobs, pgstore.NewJob{Route: route, Kind: "k", Queue: "q", Key: key, Lane: l, Coalesce: true,
				DedupeKey: fmt.Sprint(offset), Payload: fmt.Appendf(nil, `{"n":%d}`, offset), MaxAttempts: 3,
				Topic: route, Offset: offset})
		}
		if _, err := s.IngestCommit(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	states := func(route, key string) map[string][]int64 {
		t.Helper()
		rows, err := s.Pool().Query(ctx, `SELECT state, src_offset FROM jobs WHERE route = $1 AND key = $2 ORDER BY id`, route, key)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		out := map[string][]int64{}
		for rows.Next() {
			var st string
			var off int64
			if err := rows.Scan(&st, &off); err != nil {
				t.Fatal(err)
			}
			out[st] = append(out[st], off)
		}
		return out
	}
	ingest("r", "a", nil, 3) // offsets 1-3: one batch
	ingest("r", "a", nil, 2) // 4-5: a later one
	if got := states("r", "a"); len(got["queued"]) != 1 || got["queued"][0] != 5 || len(got["coalesced"]) != 4 {
		t.Fatalf("key a: %v; want offset 5 queued, 4 coalesced", got)
	}
	testenv.ClaimOne(t, s, "q")
	ingest("r", "a", nil, 1) // 6: the running job 5 stays
	if got := states("r", "a"); len(got["running"]) != 1 || len(got["queued"]) != 1 || got["queued"][0] != 6 {
		t.Fatalf("key a after a claim: %v; want 5 running and 6 queued", got)
	}
	ingest("r", "", nil, 2) // empty keys: nothing to coalesce by
	if got := states("r", ""); len(got["queued"]) != 2 {
		t.Fatalf("empty key: %v; want both queued", got)
	}
	ingest("lanes", "b", lane, 4) // 9-12: 9 is the head, 10-12 wait
	if got := states("lanes", "b"); len(got["queued"]) != 1 || got["queued"][0] != 9 ||
		len(got["waiting"]) != 1 || got["waiting"][0] != 12 || len(got["coalesced"]) != 2 {
		t.Fatalf("lane b: %v; want head 9 queued, 12 waiting, 10 and 11 coalesced", got)
	}
}
