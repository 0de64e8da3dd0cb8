package pgstore_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/internal/pgstore"
	"github.com/switchyard-dev/switchyard/internal/testenv"
)

// The batches that complete, heartbeat and release leases join their ids
// to jobs. Statistics taken while nothing ran say that almost no row is
// running; the planner then read the batch through the partial index of
// running rows and compared every running row with every id (26 ms per
// batch of 100 in the ordered benchmark). With generic plans, as a pool's
// repeated statements get, they must join by primary key whatever the
// statistics say.
func TestBatchStatementsJoinByPrimaryKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := testenv.MigratedStore(t)
	var batch pgstore.IngestBatch
	for i := range 2000 {
		batch.Jobs = append(batch.Jobs, pgstore.NewJob{Route: "r", Kind: "k", Queue: "q", Key: fmt.Sprint(i),
			DedupeKey: fmt.Sprint(i), Payload: []byte("{}"), MaxAttempts: 3, Topic: "t", Offset: int64(i)})
	}
	if _, err := s.IngestCommit(ctx, batch); err != nil {
		t.Fatal(err)
	}
	conn, err := s.Pool().Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `ANALYZE jobs`); err != nil { // nothing running yet
		t.Fatal(err)
	}
	jobs, _, err := s.JobClaim(ctx, pgstore.JobClaimParams{Queue: "q", Limit: 500, Lease: time.Minute, MaxRuntime: time.Hour})
	if err != nil || len(jobs) != 500 {
		t.Fatalf("claim: %d, %v", len(jobs), err)
	}
	var ids, tokens []string
	for _, j := range jobs[:100] {
		ids, tokens = append(ids, fmt.Sprint(j.ID)), append(tokens, fmt.Sprint(j.Token))
	}
	idArr := fmt.Sprintf("'{%s}'::bigint[]", strings.Join(ids, ","))
	tokArr := fmt.Sprintf("'{%s}'::bigint[]", strings.Join(tokens, ","))
	if _, err := conn.Exec(ctx, `SET plan_cache_mode = force_generic_plan`); err != nil {
		t.Fatal(err)
	}
	for i, c := range []struct {
		name, sql, args string
	}{
		{"complete", pgstore.CompleteSQL, idArr + ", " + tokArr + ", '{}'::text[], '{}'::text[], '{}'::text[], '{}'::bigint[]"},
		{"heartbeat", pgstore.HeartbeatSQL, idArr + ", " + tokArr + ", 60000, 3600000"},
		{"release", pgstore.ReleaseSQL, idArr + ", " + tokArr},
	} {
		name := fmt.Sprintf("p%d", i)
		if _, err := conn.Exec(ctx, "PREPARE "+name+" AS "+c.sql); err != nil {
			t.Fatalf("%s: prepare: %v", c.name, err)
		}
		rows, err := conn.Query(ctx, "EXPLAIN EXECUTE "+name+"("+c.args+")")
		if err != nil {
			t.Fatalf("%s: explain: %v", c.name, err)
		}
		var plan strings.Builder
		for rows.Next() {
			var line string
			if err := rows.Scan(&line); err != nil {
				t.Fatal(err)
			}
			plan.WriteString(line + "\n")
		}
		if err := rows.Err(); err != nil {
			t.Fatalf("%s: explain: %v", c.name, err)
		}
		if p := plan.String(); !strings.Contains(p, "jobs_pkey") {
			t.Errorf("%s does not join by primary key:\n%s", c.name, p)
		}
	}
}
