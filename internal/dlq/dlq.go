package dlq

import (
	"context"
	"errors"
	"fmt"
	"maps"
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

// Rereader reads records back from Kafka (ingest.Rereader).
type Rereader interface {
	RereadMany(ctx context.Context, ats []ingest.At) ([]*kgo.Record, []error)
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
	rs, errs := s.decode(ctx, []pgstore.DLQEntry{e})
	if err := errs[id]; err != nil {
		return 0, err
	}
	jobs, failed, err := s.store.DLQRedriveRecords(ctx, rs, by)
	if err == nil {
		err = stillPoison(failed[id])
	}
	return jobs[id], err
}

// decode is entries' records decoded again by their routes in the
// current config: the jobs a re-drive stores, and for each entry that
// cannot become one the error saying why (ErrStillPoison, and for a
// record kept in part ErrCannotRedrive or ErrKafkaUnavailable). The
// records kept in part are read again from Kafka together, in one pass
// of their partitions.
func (s *Service) decode(ctx context.Context, entries []pgstore.DLQEntry) ([]pgstore.RecordRedrive, map[int64]error) {
	errs := map[int64]error{}
	recs := s.records(ctx, entries, errs)
	var rs []pgstore.RecordRedrive
	for i, e := range entries {
		if errs[e.ID] != nil {
			continue
		}
		job, poison := s.routes[e.Route].Decode(recs[i], time.Now())
		if poison != nil {
			errs[e.ID] = fmt.Errorf("%w: %s: %s", ErrStillPoison, poison.Reason, poison.Error)
			continue
		}
		rs = append(rs, pgstore.RecordRedrive{Entry: e.ID, Job: *job})
	}
	return rs, errs
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
// re-drive holds at once: a chunk's records are stored in transactions
// of at most that many bytes, and a record larger goes alone.
const chunkRecordBytes = 4 << 20

// redriveMany re-drives a chunk of entries as far as it can together.
// The store's chunk takes the dead jobs and leaves alone the records
// (and a lane's blocked head). Those records are then decoded here, as
// many as chunkRecordBytes holds at a time (the ones kept in part read
// again from Kafka together), and each such part stored in one
// transaction, as ingest stores a batch. The rest go alone: a blocked
// head, a record larger than chunkRecordBytes, and every record of a
// transaction that failed (a job Postgres refused, a deadlock with
// ingest over the same dedupe keys), each of which then answers for
// itself. Once Kafka has not answered a read (each waits up to its
// timeout), the chunk's other records kept in part fail without one.
// The store's chunk has committed by then, so no later error fails the
// chunk as a whole (bulk.Chunked).
func (s *Service) redriveMany(ctx context.Context, ids []int64, by string) ([]bulk.Failure, []int64, error) {
	failed, left, err := s.store.DLQRedriveMany(ctx, ids, by)
	if err != nil {
		return failed, left, err
	}
	errs := map[int64]error{}
	var alone []int64
	var unavailable int64 // an entry whose read Kafka did not answer
	for len(left) > 0 {
		entries, err := s.store.DLQRecords(ctx, left, chunkRecordBytes)
		if err != nil || len(entries) == 0 {
			break
		}
		taken := map[int64]bool{}
		for _, e := range entries {
			taken[e.ID] = true
		}
		if unavailable != 0 {
			// Each read waits up to its timeout: once one did, the
			// chunk's other records kept in part are not read.
			entries = slices.DeleteFunc(entries, func(e pgstore.DLQEntry) bool {
				if e.Truncated {
					errs[e.ID] = fmt.Errorf("%w: entry %d keeps only part of its record, and was not read again after the read of entry %d failed",
						ErrKafkaUnavailable, e.ID, unavailable)
				}
				return e.Truncated
			})
		}
		rs, decodeErrs := s.decode(ctx, entries)
		if ctx.Err() != nil {
			// Their reads were cut short: they are left, and alone the
			// context's error ends the chunk (bulk.Chunked).
			break
		}
		for id, err := range decodeErrs {
			if errors.Is(err, ErrKafkaUnavailable) && (unavailable == 0 || id < unavailable) {
				unavailable = id
			}
		}
		maps.Copy(errs, decodeErrs)
		// A transaction that failed took nothing (its maps are empty),
		// and its records go alone.
		_, lockFailed, err := s.store.DLQRedriveRecords(ctx, rs, by)
		for id, err := range lockFailed {
			errs[id] = stillPoison(err)
		}
		if err != nil {
			for _, r := range rs {
				alone = append(alone, r.Entry)
			}
		}
		left = slices.DeleteFunc(left, func(id int64) bool { return taken[id] })
	}
	alone = append(alone, left...)
	slices.Sort(alone)
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

// records is entries' parked records, by index: as an entry keeps it, or
// read again from Kafka when it keeps only part of it. An entry whose
// record cannot be had (or whose route is gone) gets its error in errs.
func (s *Service) records(ctx context.Context, entries []pgstore.DLQEntry, errs map[int64]error) []*kgo.Record {
	recs := make([]*kgo.Record, len(entries))
	var reread []int // indexes of entries
	for i, e := range entries {
		src := e.Source
		switch {
		case s.routes[e.Route] == nil || src == nil:
			errs[e.ID] = fmt.Errorf("%w: no route named %q in the current config", ErrStillPoison, e.Route)
		case e.Truncated && s.rereader == nil:
			errs[e.ID] = fmt.Errorf("%w entry %d: it keeps only part of its record, and without Kafka brokers configured (kafka.brokers or SWITCHYARD_KAFKA_BROKERS) it cannot be read again", ErrCannotRedrive, e.ID)
		case e.Truncated:
			reread = append(reread, i)
		default:
			rec := &kgo.Record{Topic: src.Topic, Partition: src.Partition, Offset: src.Offset, Key: e.RecordKey, Value: e.Payload}
			for _, h := range e.Headers {
				rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: h.Key, Value: h.Value})
			}
			recs[i] = rec
		}
	}
	if len(reread) == 0 {
		return recs
	}
	ats := make([]ingest.At, len(reread))
	for j, i := range reread {
		src := entries[i].Source
		ats[j] = ingest.At{Topic: src.Topic, Partition: src.Partition, Offset: src.Offset}
	}
	read, readErrs := s.rereader.RereadMany(ctx, ats)
	for j, i := range reread {
		id := entries[i].ID
		switch err := readErrs[j]; {
		case errors.Is(err, ingest.ErrRecordGone):
			errs[id] = fmt.Errorf("%w entry %d: it keeps only part of its record, and %v", ErrCannotRedrive, id, err)
		case err != nil:
			errs[id] = fmt.Errorf("%w: entry %d keeps only part of its record, and reading it again failed: %v", ErrKafkaUnavailable, id, err)
		default:
			recs[i] = read[j]
		}
	}
	return recs
}

// Discard removes an entry for good; a lane it was blocking moves on. An
// entry re-driven already is pgstore.ErrRedriven, as for Redrive.
func (s *Service) Discard(ctx context.Context, id int64, by string) error {
	return s.store.DLQDiscard(ctx, id, by)
}
