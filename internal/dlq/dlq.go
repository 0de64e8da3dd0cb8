package dlq

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/switchyard-dev/switchyard/internal/bulk"
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
	job, err := s.decode(ctx, e)
	if err != nil {
		return 0, err
	}
	jobs, failed, err := s.store.DLQRedriveRecords(ctx, []pgstore.RecordRedrive{{Entry: id, Job: job}}, by)
	if err == nil {
		err = stillPoison(failed[id])
	}
	return jobs[id], err
}

// decode is an entry's record decoded again by its route in the current
// config: the job a re-drive stores, or ErrStillPoison saying why not.
func (s *Service) decode(ctx context.Context, e pgstore.DLQEntry) (pgstore.NewJob, error) {
	route, ok := s.routes[e.Route]
	if !ok || e.Source == nil {
		return pgstore.NewJob{}, fmt.Errorf("%w: no route named %q in the current config", ErrStillPoison, e.Route)
	}
	rec, err := s.record(ctx, e)
	if err != nil {
		return pgstore.NewJob{}, err
	}
	job, poison := route.Decode(rec, time.Now())
	if poison != nil {
		return pgstore.NewJob{}, fmt.Errorf("%w: %s: %s", ErrStillPoison, poison.Reason, poison.Error)
	}
	return *job, nil
}

// stillPoison says that Postgres refused a record's job (pgstore.ErrRefused)
// as the record still being poison.
func stillPoison(err error) error {
	if errors.Is(err, pgstore.ErrRefused) {
		return fmt.Errorf("%w: %v", ErrStillPoison, err)
	}
	return err
}

// Bulk is a bulk action on every parked entry that Filter matches (its
// State, After, Through and Limit are the action's own), taken for By.
type Bulk struct {
	Filter pgstore.DLQFilter
	By     string
	bulk.Options
}

// RedriveMatching re-drives every entry b matches (Redrive), each once:
// a job of them that dies again is parked anew, for a later re-drive.
func (s *Service) RedriveMatching(ctx context.Context, b Bulk) (bulk.Result, error) {
	return s.eachMatching(ctx, b, "re-driven", bulk.Chunked(
		func(ctx context.Context, ids []int64) ([]bulk.Failure, []int64, error) {
			return s.redriveMany(ctx, ids, b.By)
		},
		func(ctx context.Context, id int64) error {
			_, err := s.Redrive(ctx, id, b.By)
			return err
		}))
}

// chunkRecordBytes bounds the bytes of the records that a chunk of a
// re-drive holds at once; the records past it go alone.
const chunkRecordBytes = 4 << 20

// redriveMany re-drives a chunk of entries as far as it can together.
// The store's chunk takes the dead jobs and leaves alone the records
// (and a lane's blocked head); of those records, the ones kept whole, as
// many as chunkRecordBytes holds, are decoded here and stored in one
// transaction, as ingest stores a batch. The rest go alone: a blocked
// head, a truncated record (read again from Kafka), and every record of
// a transaction that failed (a job Postgres refused, a deadlock with
// ingest over the same dedupe keys), each of which then answers for
// itself. The store's chunk has committed by then, so no later error
// fails the chunk as a whole (bulk.Chunked).
func (s *Service) redriveMany(ctx context.Context, ids []int64, by string) ([]bulk.Failure, []int64, error) {
	failed, alone, err := s.store.DLQRedriveMany(ctx, ids, by)
	if err != nil || len(alone) == 0 {
		return failed, alone, err
	}
	entries, err := s.store.DLQRecords(ctx, alone, chunkRecordBytes)
	if err != nil {
		return failed, alone, nil
	}
	errs := map[int64]error{}
	var rs []pgstore.RecordRedrive
	for _, e := range entries {
		job, err := s.decode(ctx, e)
		if err != nil {
			errs[e.ID] = err
			continue
		}
		rs = append(rs, pgstore.RecordRedrive{Entry: e.ID, Job: job})
	}
	// A transaction that failed took nothing (its maps are empty), and
	// its records stay in alone.
	done, lockFailed, _ := s.store.DLQRedriveRecords(ctx, rs, by)
	for id, err := range lockFailed {
		errs[id] = stillPoison(err)
	}
	alone = slices.DeleteFunc(alone, func(id int64) bool {
		_, ok := done[id]
		return ok || errs[id] != nil
	})
	return append(failed, bulk.FailuresOf(errs)...), alone, nil
}

// DiscardMatching discards every entry b matches (Discard).
func (s *Service) DiscardMatching(ctx context.Context, b Bulk) (bulk.Result, error) {
	return s.eachMatching(ctx, b, "discarded", bulk.Chunked(
		func(ctx context.Context, ids []int64) ([]bulk.Failure, []int64, error) {
			return s.store.DLQDiscardMany(ctx, ids, b.By)
		},
		func(ctx context.Context, id int64) error { return s.Discard(ctx, id, b.By) }))
}

// eachMatching acts on the entries parked when it starts, never on those
// parked since (pgstore.DLQLastID): a re-drive's own jobs that die again
// would otherwise be among them (package bulk).
func (s *Service) eachMatching(ctx context.Context, b Bulk, done string, act bulk.Act) (bulk.Result, error) {
	last, err := s.store.DLQLastID(ctx)
	if err != nil {
		return bulk.Result{}, err
	}
	filter := b.Filter
	filter.State, filter.Through = pgstore.DLQParked, last
	src := bulk.Source{
		Count: func(ctx context.Context) (int64, error) {
			if last == 0 {
				return 0, nil
			}
			return s.store.DLQCount(ctx, filter)
		},
		Page: func(ctx context.Context, after int64, limit int) ([]int64, error) {
			f := filter
			f.After, f.Limit = after, limit
			es, err := s.store.DLQList(ctx, f)
			ids := make([]int64, len(es))
			for i, e := range es {
				ids[i] = e.ID
			}
			return ids, err
		},
	}
	return bulk.Run(ctx, src, b.Options, bulk.Entries, done, bulk.Chunk, act)
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
