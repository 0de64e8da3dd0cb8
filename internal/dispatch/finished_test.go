package dispatch

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap/zaptest"

	"github.com/switchyard-dev/switchyard/internal/metrics"
	"github.com/switchyard-dev/switchyard/internal/pgstore"
	"github.com/switchyard-dev/switchyard/internal/testenv"
	"github.com/switchyard-dev/switchyard/jobstate"
	"github.com/switchyard-dev/switchyard/workers"
)

// A handler that ended its job in its own transaction (Applier.Apply: a
// stale version skipped) and then returned an error, as a handler that
// passes ErrStale on does, is counted by the state it committed, and the
// dispatcher writes nothing over it: no retry, no lost lease.
func TestJobEndedByItsHandlerCountsItsState(t *testing.T) {
	t.Parallel()
	store := testenv.MigratedStore(t)
	enqueue(t, store, 1, 3)
	h := workers.HandlerFunc(func(ctx context.Context, j *workers.Job) error {
		if _, err := store.Pool().Exec(ctx, `UPDATE jobs SET state = 'skipped', finished_at = now(), lease_expires_at = NULL
			WHERE id = $1 AND token = $2`, j.ID, j.Token); err != nil {
			return err
		}
		j.MarkFinished(jobstate.Skipped)
		return errors.New("stale version: not newer than the last applied version")
	})
	m := runCounted(t, store, h)
	testenv.Eventually(t, 15*time.Second, "the attempt to be counted", func() bool {
		return testutil.ToFloat64(m.JobAttempts.WithLabelValues("k", "skipped")) == 1
	})
	time.Sleep(100 * time.Millisecond) // room for a wrong second write to land
	if got := testutil.CollectAndCount(m.JobAttempts); got != 1 {
		t.Errorf("%d outcome series, want skipped alone", got)
	}
	if st := states(t, store); st["skipped"] != 1 || len(st) != 1 {
		t.Errorf("job states %v, want the one job skipped", st)
	}
}

// A job cancelled while its handler runs, which returns before the cancel
// reaches it, has its success rejected: the attempt is counted cancelled
// once, by the cancel's own transaction (a tally the samplers take), and
// under no outcome by the process that ran it, which never learned why.
func TestCancelledAttemptIsCountedByTheCancel(t *testing.T) {
	t.Parallel()
	store := testenv.MigratedStore(t)
	enqueue(t, store, 1, 3)
	h := workers.HandlerFunc(func(ctx context.Context, j *workers.Job) error {
		return store.JobCancel(ctx, j.ID, "test") // and return at once, successfully
	})
	m := runCounted(t, store, h)
	testenv.Eventually(t, 15*time.Second, "the job to end cancelled", func() bool { return states(t, store)["cancelled"] == 1 })
	ends, err := store.OutcomeTallyTake(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(ends) != 1 || ends[[2]string{"k", "cancelled"}] != 1 {
		t.Errorf("tallied ends %v, want one cancelled attempt of kind k", ends)
	}
	time.Sleep(100 * time.Millisecond) // room for the rejected success to be settled
	if got := testutil.CollectAndCount(m.JobAttempts); got != 0 {
		t.Errorf("the process counted %d outcome series, want none: the cancel counted the attempt", got)
	}
}

// runCounted runs one pool of queue q whose jobs h handles, and returns
// the metrics it counts into.
func runCounted(t *testing.T, store *pgstore.Store, h workers.Handler) *metrics.Metrics {
	t.Helper()
	m := metrics.New(prometheus.NewRegistry())
	d, err := New(Config{
		Queues:  []Queue{{Name: "q", Concurrency: 1, Lease: time.Minute, MaxRuntime: time.Minute, PollInterval: 20 * time.Millisecond}},
		Resolve: func(*workers.Job) (workers.Handler, error) { return h, nil },
		Grace:   200 * time.Millisecond,
	}, store, zaptest.NewLogger(t), m)
	if err != nil {
		t.Fatal(err)
	}
	run(t, d)
	return m
}

// An attempt past its queue's max_runtime ends its handler's context with
// cause workers.ErrMaxRuntime, which a handler can tell with errors.Is.
func TestMaxRuntimeIsTheCause(t *testing.T) {
	t.Parallel()
	store := testenv.MigratedStore(t)
	enqueue(t, store, 1, 3)
	causes := make(chan error, 1)
	startQueues(t, store, workers.HandlerFunc(func(ctx context.Context, _ *workers.Job) error {
		<-ctx.Done()
		select {
		case causes <- context.Cause(ctx):
		default:
		}
		return ctx.Err()
	}), Queue{Name: "q", Concurrency: 1, Lease: time.Minute, MaxRuntime: 100 * time.Millisecond, PollInterval: 20 * time.Millisecond})
	select {
	case cause := <-causes:
		if !errors.Is(cause, workers.ErrMaxRuntime) || cause.Error() != "max_runtime exceeded (100ms)" {
			t.Errorf("cause %v, want workers.ErrMaxRuntime naming 100ms", cause)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the handler's context never ended")
	}
}
