package dlq

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/switchyard-dev/switchyard/ingest"
	"github.com/switchyard-dev/switchyard/internal/pgstore"
)

// Reasons an entry is parked (SPEC §6).
var Reasons = []string{"decode", "missing_field", "too_large", "permanent", "max_attempts", "gap"}

// ErrStillPoison is returned when a parked record still cannot become a
// job under the current routes.
var ErrStillPoison = errors.New("record still cannot become a job")

// Service re-drives and discards DLQ entries.
type Service struct {
	store  *pgstore.Store
	routes map[string]*ingest.Route // by topic
}

// New returns a Service; routes are the current config's, used to decode
// parked records again.
func New(store *pgstore.Store, routes []*ingest.Route) *Service {
	s := &Service{store: store, routes: map[string]*ingest.Route{}}
	for _, r := range routes {
		s.routes[r.Topic] = r
	}
	return s
}

// Redrive puts an entry back to work and returns the job id. A dead job
// gets fresh attempts (in its lane's order, for ordered routes). A parked
// record is decoded again with the current route — useful after fixing a
// route's field names — and becomes a job if it now can.
func (s *Service) Redrive(ctx context.Context, id int64) (int64, error) {
	jobID, err := s.store.DLQRedrive(ctx, id)
	if !errors.Is(err, pgstore.ErrRecordEntry) {
		return jobID, err
	}
	e, err := s.store.DLQGet(ctx, id)
	if err != nil {
		return 0, err
	}
	route, ok := s.routes[e.Route]
	if !ok || e.Source == nil {
		return 0, fmt.Errorf("%w: no route for topic %q in the current config", ErrStillPoison, e.Route)
	}
	rec := &kgo.Record{Topic: e.Source.Topic, Partition: e.Source.Partition, Offset: e.Source.Offset, Value: e.Payload}
	for _, h := range e.Headers {
		rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: h.Key, Value: h.Value})
	}
	job, poison := route.Decode(rec, time.Now())
	if poison != nil {
		return 0, fmt.Errorf("%w: %s: %s", ErrStillPoison, poison.Reason, poison.Error)
	}
	if _, err := s.store.DLQRedriveRecord(ctx, id, *job); err != nil {
		return 0, err
	}
	row, err := s.store.JobList(ctx, pgstore.JobFilter{Limit: 1, After: 0, Key: job.Key, Route: job.Route, DedupeKey: job.DedupeKey})
	if err != nil || len(row) == 0 {
		return 0, err
	}
	return row[0].ID, nil
}

// Discard removes an entry for good; a lane it was blocking moves on.
func (s *Service) Discard(ctx context.Context, id int64) error {
	return s.store.DLQDiscard(ctx, id)
}
