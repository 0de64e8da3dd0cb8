package bulk

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
)

// items is a Source over ids 1..n that act removes, as a re-drive or a
// cancel takes an item off the list it matched.
type items struct{ left []int64 }

func newItems(n int) *items {
	it := &items{}
	for i := range int64(n) {
		it.left = append(it.left, i+1)
	}
	return it
}

func (it *items) source() Source {
	return Source{
		Count: func(context.Context) (int64, error) { return int64(len(it.left)), nil },
		Page:  it.pages(func(int64) bool { return true }),
	}
}

// pages pages through the items left that keep keeps.
func (it *items) pages(keep func(int64) bool) func(context.Context, int64, int) ([]int64, error) {
	return func(_ context.Context, after int64, limit int) ([]int64, error) {
		var out []int64
		for _, id := range it.left {
			if id > after && len(out) < limit && keep(id) {
				out = append(out, id)
			}
		}
		return out, nil
	}
}

func (it *items) take(_ context.Context, id int64) error {
	if id%100 == 7 {
		return fmt.Errorf("item %d refuses", id)
	}
	it.left = slices.DeleteFunc(it.left, func(x int64) bool { return x == id })
	return nil
}

// takeChunk is an Act over it: a chunk that holds a refusing item fails
// whole, taking none of its items, as a transaction that rolls back.
func (it *items) takeChunk(calls *[][]int64) Act {
	return func(ctx context.Context, ids []int64) ([]Failure, error) {
		*calls = append(*calls, slices.Clone(ids))
		for _, id := range ids {
			if id%100 == 7 {
				return nil, fmt.Errorf("item %d refuses", id)
			}
		}
		for _, id := range ids {
			if err := it.take(ctx, id); err != nil {
				return nil, err
			}
		}
		return nil, nil
	}
}

// Every item once, across pages, its failures named; at the count only.
func TestRunTakesEveryItemOnceAtTheCount(t *testing.T) {
	it := newItems(1234) // three pages
	_, err := Run(context.Background(), it.source(), Options{Expect: 1000}, Entries, "discarded", 1, each(it.take))
	var changed *CountChanged
	if !errors.As(err, &changed) || err.Error() != "1234 entries match now, not 1000: nothing discarded; count them again" || len(it.left) != 1234 {
		t.Fatalf("at the wrong count: %v, %d left", err, len(it.left))
	}
	var seen []Result
	res, err := Run(context.Background(), it.source(), Options{Expect: 1234, Progress: func(r Result) { seen = append(seen, r) }},
		Entries, "discarded", 1, each(it.take))
	if err != nil || res.Matching != 1234 || res.Done != 1221 || len(res.Failed) != 13 || len(it.left) != 13 {
		t.Fatalf("Run: %v; matching %d, done %d, failed %d, left %d; want 1234, 1221, 13, 13", err, res.Matching, res.Done, len(res.Failed), len(it.left))
	}
	if res.Failed[0] != (Failure{ID: 7, Error: "item 7 refuses"}) || len(seen) != 1234 || seen[len(seen)-1].Done != 1221 {
		t.Errorf("first failure %+v, %d progress calls", res.Failed[0], len(seen))
	}
	if got := (&CountChanged{Matching: 1, Expected: 2, Noun: Jobs, Done: "cancelled"}).Error(); got != "1 job matches now, not 2: nothing cancelled; count them again" {
		t.Errorf("CountChanged of one job: %q", got)
	}
}

// Chunks take every item once: a chunk that fails whole is taken again one
// item at a time, so that its other items are acted on and the failure
// names its own item; a chunk never spans two pages.
func TestRunTakesChunksAndRetriesAFailedOneItemByItem(t *testing.T) {
	it := newItems(1234)
	var calls [][]int64
	var seen []Result
	res, err := Run(context.Background(), it.source(), Options{Expect: -1, Progress: func(r Result) { seen = append(seen, r) }},
		Jobs, "cancelled", 100, it.takeChunk(&calls))
	if err != nil || res.Done != 1221 || len(res.Failed) != 13 || len(it.left) != 13 {
		t.Fatalf("Run: %v; done %d, failed %d, left %d; want 1221, 13, 13", err, res.Done, len(res.Failed), len(it.left))
	}
	if res.Failed[0] != (Failure{ID: 7, Error: "item 7 refuses"}) || res.Failed[12].ID != 1207 {
		t.Errorf("failures %+v", res.Failed)
	}
	// Pages of 500 in chunks of 100: 5 + 5 + 3 chunks (the last of 34),
	// each of which holds a refusing item and is retried in 100 (or 34).
	if len(seen) != 13 || seen[12].Done != 1221 {
		t.Errorf("%d progress calls, the last %+v; want 13, one a chunk", len(seen), seen[len(seen)-1])
	}
	if want := 13 + 12*100 + 34; len(calls) != want || len(calls[0]) != 100 || len(calls[1]) != 1 || !slices.Equal(calls[len(calls)-35], seqIDs(1201, 1234)) {
		t.Errorf("%d calls of act (first %d ids, then %d), want %d", len(calls), len(calls[0]), len(calls[1]), want)
	}
}

// First's items are all taken before Page's, and an item that failed in
// First's walk is not taken again in Page's.
func TestRunTakesFirstsItemsFirstAndNoItemTwice(t *testing.T) {
	it := newItems(1234)
	src := it.source()
	src.First = it.pages(func(id int64) bool { return id%3 == 0 })
	var order []int64
	res, err := Run(context.Background(), src, Options{Expect: 1234}, Jobs, "cancelled", 100,
		each(func(ctx context.Context, id int64) error {
			order = append(order, id)
			return it.take(ctx, id)
		}))
	if err != nil || res.Matching != 1234 || res.Done != 1221 || len(res.Failed) != 13 || len(order) != 1234 {
		t.Fatalf("Run: %v; matching %d, done %d, failed %d, %d calls; want 1234, 1221, 13, 1234", err, res.Matching, res.Done, len(res.Failed), len(order))
	}
	firsts := 1234 / 3
	for i, id := range order {
		if (i < firsts) != (id%3 == 0) {
			t.Fatalf("item %d taken %dth, with %d of First's to take first", id, i+1, firsts)
		}
	}
	// 207, 507, 807 and 1107 refuse in First's walk, and Page lists them
	// again: taken once each.
	if n := len(slices.DeleteFunc(slices.Clone(order), func(id int64) bool { return id != 207 })); n != 1 {
		t.Errorf("item 207 taken %d times", n)
	}
}

func seqIDs(from, to int64) []int64 {
	var ids []int64
	for id := from; id <= to; id++ {
		ids = append(ids, id)
	}
	return ids
}

// A stop takes effect between two chunks: the one under way completes and
// is counted; the rest are as they were.
func TestRunStopsBetweenChunks(t *testing.T) {
	for _, chunk := range []int{1, 3} {
		it := newItems(10)
		stop := make(chan struct{})
		res, err := Run(context.Background(), it.source(), Options{Expect: -1, Stop: stop}, Jobs, "cancelled", chunk,
			each(func(ctx context.Context, id int64) error {
				if id == 4 {
					close(stop)
				}
				return it.take(ctx, id)
			}))
		done := 4 // the chunk under way ends at 4 (chunk 1) or at 6 (4, 5, 6)
		if chunk == 3 {
			done = 6
		}
		if !errors.Is(err, ErrStopped) || res.Done != done || len(it.left) != 10-done || res.Matching != 10 {
			t.Fatalf("chunk %d stopped at item 4: %v; done %d, left %d, matching %d; want ErrStopped, %d, %d, 10",
				chunk, err, res.Done, len(it.left), res.Matching, done, 10-done)
		}
	}
}
