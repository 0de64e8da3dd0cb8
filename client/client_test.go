package client_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"

	"github.com/switchyard-dev/switchyard/client"
	"github.com/switchyard-dev/switchyard/config"
	"github.com/switchyard-dev/switchyard/internal/testenv"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// setup is a migrated schema, a config of two routes on it (one ordered
// by a payload field), a client, and a connection of the app's own with
// a table of its own in the schema.
func setup(t *testing.T) (*client.Client, *pgx.Conn, string) {
	t.Helper()
	ctx := context.Background()
	c, schema := newClient(t, `
queues:
  q: {concurrency: 1}
routes:
  - {topic: reports, kind: report.build, queue: q, target: {go: true}}
  - {topic: orders, kind: order.sync, queue: q, ordered: true, key: {field: customer}, target: {go: true}}
`)
	conn, err := pgx.Connect(ctx, testenv.DatabaseURL(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	if _, err := conn.Exec(ctx, `CREATE TABLE `+pgx.Identifier{schema, "app_orders"}.Sanitize()+` (id int)`); err != nil {
		t.Fatal(err)
	}
	return c, conn, schema
}

// newClient is a client of a new schema with the queues and routes of
// body, closed when the test ends.
func newClient(t *testing.T, body string) (*client.Client, string) {
	t.Helper()
	schema := testenv.Schema(t)
	cfg, err := config.Parse(fmt.Appendf(nil, "kafka: {brokers: [\"127.0.0.1:1\"]}\npostgres: {url: %q, schema: %s}\n%s",
		testenv.DatabaseURL(t), schema, body), nil)
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c, schema
}

func count(t *testing.T, conn *pgx.Conn, schema, from string) int {
	t.Helper()
	var n int
	if err := conn.QueryRow(context.Background(), `SELECT count(*) FROM `+pgx.Identifier{schema, from}.Sanitize()).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// EnqueueTx makes the job in the app's own transaction: it exists if and
// only if that transaction commits, beside the app's own write; its queue
// is notified at the commit, not before; the transaction's search_path
// is its own again afterwards.
func TestEnqueueTxCommitsOrRollsBackWithTheApp(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, conn, schema := setup(t)
	job := client.Job{Queue: "q", Kind: "report.build", Payload: []byte(`{"report":7}`), IdempotencyKey: "report-7"}

	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.EnqueueTx(ctx, tx, job); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if n := count(t, conn, schema, "jobs"); n != 0 {
		t.Fatalf("%d jobs after the rollback, want none", n)
	}

	listener, err := pgx.Connect(ctx, testenv.DatabaseURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer listener.Close(ctx)
	if _, err := listener.Exec(ctx, `LISTEN `+pgx.Identifier{schema + "_jobs"}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	tx, err = conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var path string
	if err := tx.QueryRow(ctx, `SHOW search_path`).Scan(&path); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO `+pgx.Identifier{schema, "app_orders"}.Sanitize()+` VALUES (7)`); err != nil {
		t.Fatal(err)
	}
	enq, err := c.EnqueueTx(ctx, tx, job)
	if err != nil || !enq.Created || enq.State != "queued" {
		t.Fatalf("EnqueueTx: %+v %v", enq, err)
	}
	var after string
	if err := tx.QueryRow(ctx, `SHOW search_path`).Scan(&after); err != nil || after != path {
		t.Fatalf("search_path %q after EnqueueTx, want the transaction's own %q (%v)", after, path, err)
	}
	wait, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	if n, err := listener.WaitForNotification(wait); err == nil {
		t.Fatalf("notified before the commit: %+v", n)
	}
	cancel()
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	wait, cancel = context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if n, err := listener.WaitForNotification(wait); err != nil || n.Payload != "q" {
		t.Fatalf("no wake-up of queue q at the commit: %+v %v", n, err)
	}
	if jobs, rows := count(t, conn, schema, "jobs"), count(t, conn, schema, "app_orders"); jobs != 1 || rows != 1 {
		t.Fatalf("%d jobs and %d app rows after the commit, want one each", jobs, rows)
	}

	again, err := c.Enqueue(ctx, job)
	if err != nil || again.Created || again.ID != enq.ID {
		t.Fatalf("a second Enqueue of the key: %+v %v, want job %d found", again, err, enq.ID)
	}
	job.Payload = []byte(`{"report":8}`)
	if _, err := c.Enqueue(ctx, job); !errors.Is(err, client.ErrKeyReused) {
		t.Fatalf("the key with another payload: %v, want ErrKeyReused", err)
	}
}

// A job of an ordered route joins its key's lane (the key read from the
// payload, as the route reads a record's); bad input names the Job field.
func TestEnqueueJoinsTheLaneAndNamesBadFields(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, conn, schema := setup(t)
	first, err := c.Enqueue(ctx, client.Job{Queue: "q", Kind: "order.sync", Payload: []byte(`{"customer":"c-1"}`), IdempotencyKey: "a"})
	if err != nil || first.State != "queued" {
		t.Fatalf("first job of lane c-1: %+v %v, want its head, queued", first, err)
	}
	second, err := c.Enqueue(ctx, client.Job{Queue: "q", Kind: "order.sync", Payload: []byte(`{"customer":"c-1"}`), IdempotencyKey: "b"})
	if err != nil || second.State != "waiting" {
		t.Fatalf("second job of lane c-1: %+v %v, want waiting behind the head", second, err)
	}
	var key string
	if err := conn.QueryRow(ctx, `SELECT key FROM `+pgx.Identifier{schema, "jobs"}.Sanitize()+` WHERE id = $1`, second.ID).Scan(&key); err != nil || key != "c-1" {
		t.Fatalf("key %q (%v), want c-1 from the payload", key, err)
	}
	for _, tc := range []struct {
		job   client.Job
		field string
	}{
		{client.Job{Queue: "q", Kind: "report.build"}, "IdempotencyKey"},
		{client.Job{Queue: "q", Kind: "nope", IdempotencyKey: "x"}, "Kind"},
		{client.Job{Queue: "q", Kind: "order.sync", Payload: []byte(`{}`), IdempotencyKey: "x"}, "Key"},
		{client.Job{Queue: "q", Kind: "report.build", IdempotencyKey: "y", RunAt: time.Now().AddDate(200, 0, 0)}, "RunAt"},
	} {
		var in *client.InputError
		if _, err := c.Enqueue(ctx, tc.job); !errors.As(err, &in) || in.Field != tc.field {
			t.Errorf("%+v: %v, want an InputError naming %s", tc.job, err, tc.field)
		} else if m := strings.ToLower(in.Msg); strings.Contains(m, "header") || strings.Contains(m, "parameter") || strings.Contains(m, "body") {
			t.Errorf("%+v: %q speaks of HTTP to a Go caller", tc.job, err)
		}
	}
	if _, err := c.Enqueue(ctx, client.Job{Queue: "nope", Kind: "k", IdempotencyKey: "z"}); !errors.Is(err, client.ErrUnknownQueue) {
		t.Errorf("unknown queue: %v", err)
	}
}

// The errors a caller handles by errors.Is also say what they are about,
// as the admin API's answers do: the queue that does not exist (and the
// ones that do) or is full, the job that has the reused key. A nil tx is
// an error, not a panic.
func TestErrorsNameTheQueueAndTheJob(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, _ := newClient(t, `
queues:
  small: {concurrency: 1, max_depth: 1}
routes:
  - {topic: reports, kind: report.build, queue: small, target: {go: true}}
`)
	job := client.Job{Queue: "small", Kind: "report.build", Payload: []byte(`{}`), IdempotencyKey: "a"}
	first, err := c.Enqueue(ctx, job)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		job  client.Job
		is   error
		says []string
	}{
		{"unknown queue", client.Job{Queue: "smal", Kind: "report.build", IdempotencyKey: "b"}, client.ErrUnknownQueue, []string{`"smal"`, "small"}},
		{"full queue", client.Job{Queue: "small", Kind: "report.build", Payload: []byte(`{}`), IdempotencyKey: "c"}, client.ErrQueueFull, []string{`"small"`}},
		{"reused key", client.Job{Queue: "small", Kind: "report.build", Payload: []byte(`{"other":1}`), IdempotencyKey: "a"}, client.ErrKeyReused, []string{fmt.Sprintf("job %d", first.ID)}},
	} {
		_, err := c.Enqueue(ctx, tc.job)
		if !errors.Is(err, tc.is) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.is)
			continue
		}
		for _, s := range tc.says {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("%s: %q does not say %s", tc.name, err, s)
			}
		}
	}
	if _, err := c.EnqueueTx(ctx, nil, job); err == nil || !strings.Contains(err.Error(), "tx is nil") {
		t.Errorf("EnqueueTx with a nil tx: %v, want it refused", err)
	}
}
