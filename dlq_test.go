package switchyard_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap/zaptest"

	switchyard "github.com/switchyard-dev/switchyard"
	"github.com/switchyard-dev/switchyard/config"
	"github.com/switchyard-dev/switchyard/internal/pgstore"
	"github.com/switchyard-dev/switchyard/internal/testenv"
	"github.com/switchyard-dev/switchyard/workers"
)

// An embedder re-drives and discards DLQ entries through the engine,
// with the errors the admin API maps to its statuses.
func TestEngineDLQActions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema, topic := testenv.Schema(t), testenv.Topic(t, 1)
	store := testenv.Store(t, schema)
	cfg, err := config.Parse(fmt.Appendf(nil, `
kafka: {group: g-%s}
postgres: {schema: %s, max_conns: 4}
http: {listen: "off"}
shutdown_grace: 1s
queues:
  q: {concurrency: 2, poll_interval: 50ms}
routes:
  - topic: %s
    kind: k
    queue: q
    key: {field: id}
    target: {go: true}
`, schema, schema, topic), os.Getenv)
	if err != nil {
		t.Fatal(err)
	}
	eng, err := switchyard.New(cfg, switchyard.Options{Logger: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int32
	_ = eng.Register("k", workers.HandlerFunc(func(context.Context, *workers.Job) error {
		if calls.Add(1) <= 2 {
			return workers.Permanent(errors.New("not yet"))
		}
		return nil
	}))
	if err := eng.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = eng.Stop(ctx) })
	testenv.Produce(t, topic, &kgo.Record{Value: []byte(`{"id":"a"}`)}, &kgo.Record{Value: []byte(`{"id":"b"}`)})

	var entries []pgstore.DLQEntry
	testenv.Eventually(t, time.Minute, "two dead jobs in the DLQ", func() bool {
		entries, err = store.DLQList(ctx, pgstore.DLQFilter{Limit: 10})
		return err == nil && len(entries) == 2
	})
	jobID, err := eng.RedriveDLQ(ctx, entries[0].ID)
	if err != nil || jobID == 0 {
		t.Fatalf("RedriveDLQ: job %d, %v", jobID, err)
	}
	testenv.Eventually(t, time.Minute, "the re-driven job succeeds", func() bool {
		j, err := store.JobGet(ctx, jobID)
		return err == nil && j.State == "succeeded"
	})
	if err := eng.DiscardDLQ(ctx, entries[1].ID); err != nil {
		t.Fatalf("DiscardDLQ: %v", err)
	}
	if _, err := eng.RedriveDLQ(ctx, entries[1].ID); !errors.Is(err, switchyard.ErrNotFound) {
		t.Fatalf("RedriveDLQ of a discarded entry: %v, want ErrNotFound", err)
	}
	if err := eng.DiscardDLQ(ctx, 1<<40); !errors.Is(err, switchyard.ErrNotFound) || !strings.Contains(err.Error(), fmt.Sprint(1<<40)) {
		t.Fatalf("DiscardDLQ of a missing entry: %v, want ErrNotFound naming the entry", err)
	}
	// After Stop, the actions say the engine stopped, not "closed pool".
	if err := eng.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := eng.RedriveDLQ(ctx, entries[0].ID); err == nil || !strings.Contains(err.Error(), "engine is stopped") {
		t.Errorf("RedriveDLQ after Stop: %v, want it to say the engine is stopped", err)
	}
}
