package bulk

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
)

// Source is what an action reads: the items matching its filter that
// existed when it started (up to an id the source took then), by id.
type Source struct {
	// Count counts them.
	Count func(ctx context.Context) (int64, error)
	// Page returns up to limit of their ids after the id given, in
	// order. Items leave the list as they are acted on, and keyset
	// pagination on id never revisits one.
	Page func(ctx context.Context, after int64, limit int) ([]int64, error)
	// First, if set, pages as Page does through some of them, to be
	// taken before Page takes the rest: those that acting on others
	// first would change (a lane's waiting jobs, which cancelling its
	// head would hand to a worker). An item it took, or could not, is
	// not taken again.
	First func(ctx context.Context, after int64, limit int) ([]int64, error)
}

// Options are the caller's say in an action.
type Options struct {
	// Expect ≥ 0 is the number of items a person confirmed: the action
	// takes none (*CountChanged) unless that many match when it starts.
	Expect int64
	// Stop, once closed, stops the action before its next chunk
	// (ErrStopped). Cancelling the context instead could end a chunk's
	// transaction unsure whether it committed, and the count with it.
	Stop <-chan struct{}
	// Progress, if set, is told what the action did after each chunk.
	Progress func(Result)
}

// Result is what an action did: Matching items matched when it started,
// Done were acted on, Failed could not be.
type Result struct {
	Matching int64
	Done     int
	Failed   []Failure
}

// Failure is an item that an action could not act on, and why.
type Failure struct {
	ID    int64  `json:"id"`
	Error string `json:"error"`
}

// Noun is what an action's items are called, one and many.
type Noun struct{ One, Many string }

// Entries and Jobs are the items of the DLQ's actions and of jobs'.
var (
	Entries = Noun{"entry", "entries"}
	Jobs    = Noun{"job", "jobs"}
)

// Count is n items, said as a count: "1 entry", "3 entries".
func (n Noun) Count(k int64) string {
	if k == 1 {
		return "1 " + n.One
	}
	return fmt.Sprintf("%d %s", k, n.Many)
}

// CountChanged refuses an action, which took nothing: the items that
// match now are not as many as a person confirmed.
type CountChanged struct {
	Matching, Expected int64
	Noun               Noun
	Done               string // "re-driven", "discarded", "cancelled"
}

func (e *CountChanged) Error() string {
	match := "match"
	if e.Matching == 1 {
		match = "matches"
	}
	return fmt.Sprintf("%s %s now, not %d: nothing %s; count them again", e.Noun.Count(e.Matching), match, e.Expected, e.Done)
}

// ErrStopped is an action that Options.Stop ended before its end: the
// items it did not reach are as they were.
var ErrStopped = errors.New("stopped before the end")

// page is how many ids an action reads at a time.
const page = 500

// Chunk is how many items an action takes in one transaction. A hundred:
// a bulk cancel took 1,900 jobs a second one at a time, 25,000 in chunks
// of 100 and 31,000 in chunks of 500, whose locks each statement holds
// five times as long (and a stop waits for).
const Chunk = 100

// Act acts on a chunk of items and returns those it could not act on,
// each with why; it acted on the others. An error means it acted on none
// of them (its transaction rolled back), unless ctx ended.
type Act func(ctx context.Context, ids []int64) ([]Failure, error)

// FailuresOf is errs, an error for each item an action could not act
// on, as its failures, in id order.
func FailuresOf(errs map[int64]error) []Failure {
	var failed []Failure
	for id, err := range errs {
		failed = append(failed, Failure{ID: id, Error: err.Error()})
	}
	slices.SortFunc(failed, func(a, b Failure) int { return cmp.Compare(a.ID, b.ID) })
	return failed
}

// each is the Act of an action taken one item at a time, each item in a
// transaction of its own.
func each(act func(context.Context, int64) error) Act {
	return func(ctx context.Context, ids []int64) ([]Failure, error) {
		var failed []Failure
		for _, id := range ids {
			if err := act(ctx, id); err != nil {
				if ctx.Err() != nil {
					return failed, ctx.Err()
				}
				failed = append(failed, Failure{ID: id, Error: err.Error()})
			}
		}
		return failed, nil
	}
}

// Chunked is the Act of an action that takes what it can of a chunk in
// one transaction (many) and leaves some of its items to be taken alone,
// after it, each in a transaction of its own (one): those whose action
// reaches further than one statement should (a lane's job, a record to
// decode again). A chunk of one item is taken alone. Once many has
// committed, an error is only ctx's.
func Chunked(many func(ctx context.Context, ids []int64) (failed []Failure, alone []int64, err error),
	one func(context.Context, int64) error) Act {
	oneByOne := each(one)
	return func(ctx context.Context, ids []int64) ([]Failure, error) {
		if len(ids) == 1 {
			return nil, one(ctx, ids[0])
		}
		failed, alone, err := many(ctx, ids)
		if err != nil {
			return nil, err
		}
		more, err := oneByOne(ctx, alone)
		failed = append(failed, more...)
		slices.SortFunc(failed, func(a, b Failure) int { return cmp.Compare(a.ID, b.ID) })
		return failed, err
	}
}

// Run acts on every item of src, up to chunk of them per call of act.
// noun and done say what it takes and does in a refusal.
//
// A chunk that fails as a whole is taken again one item at a time, so
// that one item that cannot be acted on (or a transaction that met a
// lock conflict) costs its chunk nothing but the retry, and each failure
// names its own item.
func Run(ctx context.Context, src Source, opt Options, noun Noun, done string, chunk int, act Act) (Result, error) {
	var res Result
	var err error
	if res.Matching, err = src.Count(ctx); err != nil {
		return Result{}, err
	}
	if opt.Expect >= 0 && res.Matching != opt.Expect {
		return Result{}, &CountChanged{Matching: res.Matching, Expected: opt.Expect, Noun: noun, Done: done}
	}
	chunk = max(chunk, 1)
	failed := map[int64]bool{}
	for _, pages := range []func(context.Context, int64, int) ([]int64, error){src.First, src.Page} {
		if pages == nil {
			continue
		}
		if err := res.walk(ctx, pages, failed, opt, chunk, act); err != nil {
			return res, err
		}
	}
	return res, nil
}

// walk takes the items that pages lists, but those in failed (which it
// adds its failures to), in chunks.
func (res *Result) walk(ctx context.Context, pages func(context.Context, int64, int) ([]int64, error),
	failed map[int64]bool, opt Options, chunk int, act Act) error {
	for after := int64(0); res.Matching > 0; {
		ids, err := pages(ctx, after, page)
		if err != nil {
			return err
		}
		full := len(ids) == page
		if len(ids) > 0 {
			after = ids[len(ids)-1]
		}
		ids = slices.DeleteFunc(ids, func(id int64) bool { return failed[id] })
		for len(ids) > 0 {
			select {
			case <-opt.Stop:
				return ErrStopped
			default:
			}
			n := min(chunk, len(ids))
			before := len(res.Failed)
			if err := res.take(ctx, act, ids[:n]); err != nil {
				return err
			}
			for _, f := range res.Failed[before:] {
				failed[f.ID] = true
			}
			ids = ids[n:]
			if opt.Progress != nil {
				opt.Progress(*res)
			}
		}
		if !full {
			return nil
		}
	}
	return nil
}

// take acts on one chunk and counts what it did; it returns an error
// only when ctx ended.
func (res *Result) take(ctx context.Context, act Act, ids []int64) error {
	failed, err := act(ctx, ids)
	if err != nil && ctx.Err() != nil {
		return ctx.Err()
	}
	if err != nil && len(ids) > 1 {
		for _, id := range ids {
			if err := res.take(ctx, act, []int64{id}); err != nil {
				return err
			}
		}
		return nil
	}
	if err != nil {
		failed = []Failure{{ID: ids[0], Error: err.Error()}}
	}
	res.Done += len(ids) - len(failed)
	res.Failed = append(res.Failed, failed...)
	return nil
}
