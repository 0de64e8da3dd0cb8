package pgstore_test

import (
	"context"
	"testing"

	"github.com/switchyard-dev/switchyard/internal/pgstore"
	"github.com/switchyard-dev/switchyard/internal/testenv"
	"github.com/switchyard-dev/switchyard/jobstate"
)

// An outcome's span is what the next claim of the job hands out, so that
// a retry's span can link to the attempt before it; an outcome without one
// (tracing off in that process) keeps the last, and a stale outcome
// writes nothing.
func TestAttemptSpanReachesTheNextClaim(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := testenv.MigratedStore(t)
	if _, err := s.JobEnqueue(ctx, pgstore.NewJob{Origin: pgstore.OriginAPI, Route: "r", Kind: "k", Queue: "q",
		DedupeKey: "d1", Payload: []byte(`{}`), MaxAttempts: 5}, pgstore.Actor{}); err != nil {
		t.Fatal(err)
	}
	claim := func() *pgstore.Claimed {
		t.Helper()
		return testenv.ClaimOne(t, s, "q")
	}
	retry := func(j *pgstore.Claimed, span string) {
		t.Helper()
		c, err := s.JobComplete(ctx, []pgstore.Outcome{{ID: j.ID, Token: j.Token, State: jobstate.Retrying,
			Error: "503", Span: span}})
		if err != nil || !c.Applied[j.Token] {
			t.Fatalf("complete retrying: %v %v", c.Applied, err)
		}
	}
	const first = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	j := claim()
	if j.AttemptSpan != "" {
		t.Fatalf("first claim: attempt span %q, want none", j.AttemptSpan)
	}
	retry(j, first)
	j = claim()
	if j.AttemptSpan != first {
		t.Fatalf("second claim: attempt span %q, want %q", j.AttemptSpan, first)
	}
	retry(j, "")
	j = claim()
	if j.AttemptSpan != first {
		t.Fatalf("after an outcome without a span: %q, want the last one kept (%q)", j.AttemptSpan, first)
	}
	// A stale outcome (its token no longer holds) records nothing.
	stale := *j
	stale.Token--
	if c, err := s.JobComplete(ctx, []pgstore.Outcome{{ID: stale.ID, Token: stale.Token, State: jobstate.Retrying,
		Error: "x", Span: "00-11111111111111111111111111111111-2222222222222222-01"}}); err != nil || len(c.Applied) != 0 {
		t.Fatalf("stale outcome: %v %v", c.Applied, err)
	}
	retry(j, "")
	if j = claim(); j.AttemptSpan != first {
		t.Fatalf("after a stale outcome with a span: %q, want %q", j.AttemptSpan, first)
	}
}
