package dlq

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/switchyard-dev/switchyard/internal/ingest"
	"github.com/switchyard-dev/switchyard/internal/pgstore"
)

// Reasons an entry is parked (SPEC §6).
var Reasons = []string{"decode", "missing_field", "too_large", "permanent", "max_attempts", "gap"}

var (
	// ErrStillPoison is returned when a parked record still cannot become
	// a job under the current routes.
	ErrStillPoison = errors.New("record still cannot become a job")
	// ErrCannotRedrive is returned when an entry keeps only part of its
	// record and Kafka no longer has the whole record.
	ErrCannotRedrive = errors.New("cannot re-drive")
	// ErrKafkaUnavailable is returned when the record could not be read
	// again from Kafka for now; a retry may succeed.
	ErrKafkaUnavailable = errors.New("kafka unavailable")
)

// Rereader reads a record back from Kafka (ingest.Rereader).
type Rereader interface {
	Reread(ctx context.Context, topic string, partition int32, offset int64) (*kgo.Record, error)
}

// Service re-drives and discards DLQ entries.
type Service struct {
	store    *pgstore.Store
	routes   map[string]*ingest.Route // by name
	rereader Rereader
}

// New returns a Service; routes are the current config's, used to decode
// parked records again, and rereader reads truncated ones back from
// Kafka (nil: such entries cannot be re-driven).
func New(store *pgstore.Store, routes []*ingest.Route, rereader Rereader) *Service {
	s := &Service{store: store, routes: map[string]*ingest.Route{}, rereader: rereader}
	for _, r := range routes {
		s.routes[r.Name] = r
	}
	return s
}

// Redrive puts an entry back to work for by (who asks, for the audit log
// and the entry's history) and returns the job id. A dead job
// gets fresh attempts (in its lane's order, for ordered routes). A parked
// record is decoded again with the current route — useful after fixing a
// route's field names or raising max_record_bytes — and becomes a job if
// it now can; one that keeps only part of itself is read again from
// Kafka first.
func (s *Service) Redrive(ctx context.Context, id int64, by string) (int64, error) {
	jobID, err := s.store.DLQRedrive(ctx, id, by)
	if !errors.Is(err, pgstore.ErrRecordEntry) {
		return jobID, err
	}
	e, err := s.store.DLQGet(ctx, id)
	if err != nil {
		return 0, err
	}
	route, ok := s.routes[e.Route]
	if !ok || e.Source == nil {
		return 0, fmt.Errorf("%w: no route named %q in the current config", ErrStillPoison, e.Route)
	}
	rec, err := s.record(ctx, e)
	if err != nil {
		return 0, err
	}
	job, poison := route.Decode(rec, time.Now())
	if poison != nil {
		return 0, fmt.Errorf("%w: %s: %s", ErrStillPoison, poison.Reason, poison.Error)
	}
	jobID, err = s.store.DLQRedriveRecord(ctx, id, *job, by)
	if errors.Is(err, pgstore.ErrRefused) {
		return 0, fmt.Errorf("%w: %v", ErrStillPoison, err)
	}
	return jobID, err
}

// Failure is an entry that a bulk action could not act on, and why.
type Failure struct {
	ID    int64  `json:"id"`
	Error string `json:"error"`
}

// Bulk is one action over every parked entry that Filter matches (its
// State, After, Through and Limit are the action's own), taken for By.
type Bulk struct {
	Filter pgstore.DLQFilter
	// Expect ≥ 0 is the number of entries a person confirmed: the action
	// takes none (*CountChanged) unless that many match when it starts.
	Expect int64
	By     string
	// Progress, if set, is told of each entry acted on or failed.
	Progress func(BulkResult)
	// Stop, once closed, stops the action before its next entry
	// (ErrStopped). Cancelling the context instead could end an entry's
	// transaction unsure whether it committed, and the count with it.
	Stop <-chan struct{}
}

// ErrStopped is a bulk action that Bulk.Stop ended before its end: the
// entries it did not reach are still parked.
var ErrStopped = errors.New("stopped before the end")

// BulkResult is what a bulk action did: Matching entries matched when
// it started, Done were acted on, Failed could not be.
type BulkResult struct {
	Matching int64
	Done     int
	Failed   []Failure
}

// CountChanged refuses a bulk action, which took none: the entries that
// match now are not as many as a person confirmed.
type CountChanged struct {
	Matching, Expected int64
	Action             string // "re-driven", "discarded"
}

func (e *CountChanged) Error() string {
	match := "entries match"
	if e.Matching == 1 {
		match = "entry matches"
	}
	return fmt.Sprintf("%d %s now, not %d: nothing %s; count them again", e.Matching, match, e.Expected, e.Action)
}

// RedriveMatching re-drives every entry b matches (Redrive), each once:
// a job of them that dies again is parked anew, for a later re-drive.
func (s *Service) RedriveMatching(ctx context.Context, b Bulk) (BulkResult, error) {
	return s.eachMatching(ctx, b, "re-driven", func(ctx context.Context, id int64) error {
		_, err := s.Redrive(ctx, id, b.By)
		return err
	})
}

// DiscardMatching discards every entry b matches (Discard).
func (s *Service) DiscardMatching(ctx context.Context, b Bulk) (BulkResult, error) {
	return s.eachMatching(ctx, b, "discarded", func(ctx context.Context, id int64) error {
		return s.Discard(ctx, id, b.By)
	})
}

// eachMatching acts on the entries parked when it starts, never on those
// parked since (pgstore.DLQLastID): a re-drive's own jobs that die again
// would otherwise be among them, and it would chase them for as long as
// the target stays broken. Each entry is its own transaction, so an
// interrupted action leaves every entry either acted on or parked, and
// the same action again takes the rest (Bulk.Stop). It reads page by page: entries
// leave the parked list as they are acted on, and keyset pagination on
// id never revisits one.
func (s *Service) eachMatching(ctx context.Context, b Bulk, action string, act func(context.Context, int64) error) (BulkResult, error) {
	last, err := s.store.DLQLastID(ctx)
	if err != nil {
		return BulkResult{}, err
	}
	filter := b.Filter
	filter.State, filter.After, filter.Through, filter.Limit = pgstore.DLQParked, 0, last, 500
	var res BulkResult
	if last > 0 {
		if res.Matching, err = s.store.DLQCount(ctx, filter); err != nil {
			return res, err
		}
	}
	if b.Expect >= 0 && res.Matching != b.Expect {
		return BulkResult{}, &CountChanged{Matching: res.Matching, Expected: b.Expect, Action: action}
	}
	for res.Matching > 0 {
		es, err := s.store.DLQList(ctx, filter)
		if err != nil {
			return res, err
		}
		for _, e := range es {
			select {
			case <-b.Stop:
				return res, ErrStopped
			default:
			}
			filter.After = e.ID
			if err := act(ctx, e.ID); err != nil {
				if ctx.Err() != nil {
					return res, ctx.Err()
				}
				res.Failed = append(res.Failed, Failure{ID: e.ID, Error: err.Error()})
			} else {
				res.Done++
			}
			if b.Progress != nil {
				b.Progress(res)
			}
		}
		if len(es) < filter.Limit {
			break
		}
	}
	return res, nil
}

// record is the parked record of an entry: as the entry keeps it, or
// read again from Kafka when the entry keeps only part of it.
func (s *Service) record(ctx context.Context, e pgstore.DLQEntry) (*kgo.Record, error) {
	src := e.Source
	if !e.Truncated {
		rec := &kgo.Record{Topic: src.Topic, Partition: src.Partition, Offset: src.Offset, Key: e.RecordKey, Value: e.Payload}
		for _, h := range e.Headers {
			rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: h.Key, Value: h.Value})
		}
		return rec, nil
	}
	if s.rereader == nil {
		return nil, fmt.Errorf("%w entry %d: it keeps only part of its record, and without Kafka brokers configured (kafka.brokers or SWITCHYARD_KAFKA_BROKERS) it cannot be read again", ErrCannotRedrive, e.ID)
	}
	rec, err := s.rereader.Reread(ctx, src.Topic, src.Partition, src.Offset)
	switch {
	case errors.Is(err, ingest.ErrRecordGone):
		return nil, fmt.Errorf("%w entry %d: it keeps only part of its record, and %v", ErrCannotRedrive, e.ID, err)
	case err != nil:
		return nil, fmt.Errorf("%w: entry %d keeps only part of its record, and reading it again failed: %v", ErrKafkaUnavailable, e.ID, err)
	}
	return rec, nil
}

// Discard removes an entry for good; a lane it was blocking moves on. An
// entry re-driven already is pgstore.ErrRedriven, as for Redrive.
func (s *Service) Discard(ctx context.Context, id int64, by string) error {
	return s.store.DLQDiscard(ctx, id, by)
}
