package bulk

import (
	"context"
	"errors"
	"fmt"
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
}

// Options are the caller's say in an action.
type Options struct {
	// Expect ≥ 0 is the number of items a person confirmed: the action
	// takes none (*CountChanged) unless that many match when it starts.
	Expect int64
	// Stop, once closed, stops the action before its next item
	// (ErrStopped). Cancelling the context instead could end an item's
	// transaction unsure whether it committed, and the count with it.
	Stop <-chan struct{}
	// Progress, if set, is told of each item acted on or failed.
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

// Run acts on every item of src (act, one item at a time).
// noun and done say what it takes and does in a refusal.
func Run(ctx context.Context, src Source, opt Options, noun Noun, done string, act func(context.Context, int64) error) (Result, error) {
	var res Result
	var err error
	if res.Matching, err = src.Count(ctx); err != nil {
		return Result{}, err
	}
	if opt.Expect >= 0 && res.Matching != opt.Expect {
		return Result{}, &CountChanged{Matching: res.Matching, Expected: opt.Expect, Noun: noun, Done: done}
	}
	for after := int64(0); res.Matching > 0; {
		ids, err := src.Page(ctx, after, page)
		if err != nil {
			return res, err
		}
		for _, id := range ids {
			select {
			case <-opt.Stop:
				return res, ErrStopped
			default:
			}
			after = id
			if err := act(ctx, id); err != nil {
				if ctx.Err() != nil {
					return res, ctx.Err()
				}
				res.Failed = append(res.Failed, Failure{ID: id, Error: err.Error()})
			} else {
				res.Done++
			}
			if opt.Progress != nil {
				opt.Progress(res)
			}
		}
		if len(ids) < page {
			break
		}
	}
	return res, nil
}
