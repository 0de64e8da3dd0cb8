package pgstore_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/switchyard-dev/switchyard/internal/pgstore"
	"github.com/switchyard-dev/switchyard/internal/testenv"
)

// The runtime works with DML grants alone, and those grants allow no DDL:
// a compromised worker cannot alter the schema.
func TestRuntimeRoleNeedsOnlyDML(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := testenv.Schema(t)
	owner := testenv.Store(t, schema)

	b := make([]byte, 8)
	_, _ = rand.Read(b)
	role, password := testenv.Name("rt"), hex.EncodeToString(b)
	if _, err := owner.Pool().Exec(ctx, `CREATE ROLE `+pgx.Identifier{role}.Sanitize()+` LOGIN PASSWORD '`+password+`'`); err != nil {
		t.Fatalf("create role (the test database user needs CREATEROLE): %v", err)
	}
	t.Cleanup(func() {
		_, _ = owner.Pool().Exec(context.Background(), `DROP OWNED BY `+pgx.Identifier{role}.Sanitize())
		_, _ = owner.Pool().Exec(context.Background(), `DROP ROLE `+pgx.Identifier{role}.Sanitize())
	})
	if err := owner.GrantRuntime(ctx, role); err != nil {
		t.Fatal(err)
	}

	u, err := url.Parse(testenv.DatabaseURL(t))
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(role, password)
	rt, err := pgstore.Open(ctx, pgstore.Config{URL: u.String(), Schema: schema, MaxConns: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()

	// The whole runtime path, ordered and not, poison included.
	v := int64(1)
	lane := &pgstore.LanePolicy{Policy: "newer", OnDead: "block", GapTimeout: time.Minute, GapPolicy: "park"}
	_, err = rt.IngestCommit(ctx, pgstore.IngestBatch{Group: "g",
		Jobs: []pgstore.NewJob{
			{Route: "r", Kind: "k", Queue: "q", Key: "a", DedupeKey: "1", Payload: []byte("{}"), MaxAttempts: 1, Topic: "t", Offset: 0},
			{Route: "o", Kind: "k", Queue: "q", Key: "b", Version: &v, DedupeKey: "2", Payload: []byte("{}"), MaxAttempts: 1, Topic: "t", Offset: 1, Lane: lane},
		},
		Poison:  []pgstore.Poison{{Reason: "decode", Route: "r", Queue: "q", Error: "bad", Payload: []byte("x"), Topic: "t", Offset: 2}},
		Offsets: []pgstore.OffsetAdvance{{Topic: "t", Partition: 0, Expected: -1, Next: 3}}})
	if err != nil {
		t.Fatalf("ingest as runtime role: %v", err)
	}
	jobs, _, err := rt.JobClaim(ctx, pgstore.JobClaimParams{Queue: "q", Limit: 10, Lease: time.Minute, MaxRuntime: time.Hour})
	if err != nil || len(jobs) != 2 {
		t.Fatalf("claim: %d jobs, %v", len(jobs), err)
	}
	if _, err := rt.JobHeartbeat(ctx, []pgstore.Lease{{ID: jobs[0].ID, Token: jobs[0].Token}}, time.Minute, time.Hour, ""); err != nil {
		t.Fatalf("heartbeat: %v", err)
	}
	var outs []pgstore.Outcome
	for _, j := range jobs {
		outs = append(outs, pgstore.Outcome{ID: j.ID, Token: j.Token, State: "dead", Reason: "permanent", Error: "no"})
	}
	if _, err := rt.JobComplete(ctx, outs); err != nil {
		t.Fatalf("complete (dead, lane blocks): %v", err)
	}
	if _, err := rt.JobRescue(ctx, 10, nil); err != nil {
		t.Fatalf("rescue: %v", err)
	}
	if _, err := rt.LaneSweepGaps(ctx, 10); err != nil {
		t.Fatalf("gap sweep: %v", err)
	}
	// The newer ways in: the attempt key, the routes enqueue() follows,
	// and enqueue() itself, which runs with its caller's privileges.
	if _, err := rt.AttemptKey(ctx); err != nil {
		t.Fatalf("attempt key: %v", err)
	}
	if err := rt.RoutesPublish(ctx, []pgstore.RouteRow{{Queue: "q", Kind: "sql", Route: "s", MaxAttempts: 1, OnDead: "continue"}}); err != nil {
		t.Fatalf("publish routes: %v", err)
	}
	var made bool
	if err := rt.Pool().QueryRow(ctx, `SELECT created FROM enqueue(queue => 'q', kind => 'sql', payload => '',
		idempotency_key => 'i')`).Scan(&made); err != nil || !made {
		t.Fatalf("enqueue() as the runtime role: %v %v", made, err)
	}
	if _, err := rt.QueueStats(ctx, pgstore.Groups{}); err != nil {
		t.Fatalf("stats: %v", err)
	}
	entries, err := rt.DLQList(ctx, pgstore.DLQFilter{Limit: 10})
	if err != nil || len(entries) != 3 {
		t.Fatalf("dlq list: %d, %v", len(entries), err)
	}
	for _, e := range entries {
		if e.JobID == nil {
			err = rt.DLQDiscard(ctx, e.ID, "test")
		} else {
			_, err = rt.DLQRedrive(ctx, e.ID, "test")
		}
		if err != nil {
			t.Fatalf("dlq action on %d: %v", e.ID, err)
		}
	}
	if v, err := rt.SchemaVersion(ctx); err != nil || v != pgstore.LatestVersion() {
		t.Fatalf("schema version %d, %v", v, err)
	}
	lctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if err := rt.Listen(lctx, pgstore.Notices{Wake: func(string) {}}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("listen: %v", err)
	}

	// And no DDL.
	for _, ddl := range []string{`CREATE TABLE evil (x int)`, `DROP TABLE jobs`, `ALTER TABLE jobs ADD COLUMN x int`, `TRUNCATE jobs`} {
		_, err := rt.Pool().Exec(ctx, ddl)
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || pe.Code != "42501" {
			t.Errorf("%s as runtime role: err %v, want permission denied (42501)", ddl, err)
		}
	}
}
