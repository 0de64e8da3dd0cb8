package pgstore_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/switchyard-dev/switchyard/internal/pgstore"
	"github.com/switchyard-dev/switchyard/internal/testenv"
)

// The SQL function enqueue(), called by name from a connection of any
// search_path inside its own transaction: the job exists if and only if
// the transaction commits, takes its route's settings from the published
// routes, is found again by its idempotency key, joins its lane in an
// ordered route, takes a grouped route's group value as an argument, and
// bad arguments are named.
func TestSQLEnqueueInTheCallersTransaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := testenv.Schema(t)
	s := testenv.Store(t, schema)
	lane := &pgstore.LanePolicy{Policy: "none", OnDead: "continue", GapTimeout: time.Minute, GapPolicy: "park"}
	if err := s.RoutesPublish(ctx, []pgstore.RouteRow{
		{Queue: "bulk", Kind: "invoice.render", Route: "invoices", MaxAttempts: 5, TTL: time.Hour, OnDead: "continue"},
		{Queue: "bulk", Kind: "order.sync", Route: "orders", MaxAttempts: 8, Lane: lane, OnDead: "continue"},
		{Queue: "small", Kind: "k", Route: "r", MaxAttempts: 1, OnDead: "continue", MaxDepth: 1},
		{Queue: "bulk", Kind: "tenant.sync", Route: "tenants", MaxAttempts: 3, OnDead: "continue", Limited: true, Grouped: true},
	}); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, testenv.DatabaseURL(t)) // search_path: the server's default
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	fn := pgx.Identifier{schema}.Sanitize() + ".enqueue"
	enqueue := func(tx pgx.Tx, args string) (id int64, state string, created bool, err error) {
		err = tx.QueryRow(ctx, `SELECT * FROM `+fn+`(`+args+`)`).Scan(&id, &state, &created)
		return
	}
	invoice := `queue => 'bulk', kind => 'invoice.render', payload => convert_to('{"order":42}', 'UTF8'),
		idempotency_key => 'invoice-42', content_type => 'application/json'`

	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := enqueue(tx, invoice); err != nil {
		t.Fatal(err)
	}
	_ = tx.Rollback(ctx)
	jobs := func() int {
		var n int
		if err := s.Pool().QueryRow(ctx, `SELECT count(*) FROM jobs`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := jobs(); n != 0 {
		t.Fatalf("%d jobs after a rollback", n)
	}

	var id int64
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		var state string
		var created bool
		id, state, created, err = enqueue(tx, invoice)
		if err == nil && (!created || state != "queued") {
			t.Errorf("enqueue: state %s created %v", state, created)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	var route, ct string
	var attempts int
	var deadline *time.Time
	if err := s.Pool().QueryRow(ctx, `SELECT route, max_attempts, deadline, convert_from(header_values[1], 'UTF8')
		FROM jobs WHERE id = $1`, id).Scan(&route, &attempts, &deadline, &ct); err != nil {
		t.Fatal(err)
	}
	if route != "invoices" || attempts != 5 || deadline == nil || ct != "application/json" {
		t.Fatalf("job of route %s, %d attempts, deadline %v, content type %q: not its route's settings", route, attempts, deadline, ct)
	}

	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		again, _, created, err := enqueue(tx, invoice)
		if err == nil && (created || again != id) {
			t.Errorf("the same key again: job %d created %v, want job %d found", again, created, id)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct{ args, want string }{
		{strings.Replace(invoice, `{"order":42}`, `{"order":43}`, 1), "idempotency_key: invoice-42 already made job"},
		{`queue => 'bulk', kind => 'nope', payload => '', idempotency_key => 'x'`, "kind: no route of queue bulk has kind nope"},
		{`queue => 'bulk', kind => 'invoice.render', payload => '', idempotency_key => ''`, "idempotency_key: required"},
		{`queue => 'bulk', kind => 'order.sync', payload => '', idempotency_key => 'o1'`, "key: required"},
		{`queue => 'bulk', kind => 'invoice.render', payload => '', idempotency_key => 'y', run_at => now() + interval '200 years'`, "run_at:"},
		{`queue => 'bulk', kind => 'tenant.sync', payload => '', idempotency_key => 'g1'`, "group_value: required"},
		{`queue => 'bulk', kind => 'invoice.render', payload => '', idempotency_key => 'g2', group_value => 'acme'`, "group_value: route invoices has no group"},
		{`queue => 'bulk', kind => 'tenant.sync', payload => '', idempotency_key => 'g3', group_value => repeat('x', 1025)`, "group_value: over the 1024-byte limit"},
	} {
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error { _, _, _, err := enqueue(tx, tc.args); return err })
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || pe.Code != "22023" || !strings.Contains(pe.Message, tc.want) {
			t.Errorf("%s: %v, want SQLSTATE 22023 with %q", tc.args, err, tc.want)
		}
	}

	states := []string{}
	for _, k := range []string{"o1", "o2"} {
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			_, state, _, err := enqueue(tx, `queue => 'bulk', kind => 'order.sync', payload => '', key => 'c-1', idempotency_key => '`+k+`'`)
			states = append(states, state)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if strings.Join(states, ",") != "queued,waiting" {
		t.Fatalf("two jobs of lane c-1: %v, want the head queued and the next waiting behind it", states)
	}

	// A grouped route's job is counted under the group value it was given.
	var tenant int64
	if err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) (err error) {
		tenant, _, _, err = enqueue(tx, `queue => 'bulk', kind => 'tenant.sync', payload => '', idempotency_key => 't1', group_value => 'acme'`)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	var grp string
	if err := s.Pool().QueryRow(ctx, `SELECT grp FROM jobs WHERE id = $1`, tenant).Scan(&grp); err != nil || grp != "acme" {
		t.Errorf("a grouped route's job has group %q (%v), want acme", grp, err)
	}

	small := func(key, payload string) (id int64, created bool, err error) {
		err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			id, _, created, err = enqueue(tx, `queue => 'small', kind => 'k', payload => '`+payload+`', idempotency_key => '`+key+`'`)
			return err
		})
		return id, created, err
	}
	first, _, err := small("s-1", "a")
	if err != nil {
		t.Fatal(err)
	}
	var pe *pgconn.PgError
	if _, _, err := small("s-2", "b"); !errors.As(err, &pe) || pe.Code != "53400" {
		t.Fatalf("over max_depth: %v, want SQLSTATE 53400", err)
	}
	// A retried call is answered as with room; its key with another
	// payload is refused as with room.
	if id, created, err := small("s-1", "a"); err != nil || created || id != first {
		t.Fatalf("the first key again, queue full: job %d created %v (%v), want job %d found", id, created, err, first)
	}
	if _, _, err := small("s-1", "c"); !errors.As(err, &pe) || pe.Code != "22023" || !strings.Contains(pe.Message, "different payload") {
		t.Fatalf("the first key with another payload, queue full: %v, want the idempotency_key error", err)
	}
}
