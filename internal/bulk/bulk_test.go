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
		Page: func(_ context.Context, after int64, limit int) ([]int64, error) {
			var out []int64
			for _, id := range it.left {
				if id > after && len(out) < limit {
					out = append(out, id)
				}
			}
			return out, nil
		},
	}
}

func (it *items) take(_ context.Context, id int64) error {
	if id%100 == 7 {
		return fmt.Errorf("item %d refuses", id)
	}
	it.left = slices.DeleteFunc(it.left, func(x int64) bool { return x == id })
	return nil
}

// Every item once, across pages, its failures named; at the count only.
func TestRunTakesEveryItemOnceAtTheCount(t *testing.T) {
	it := newItems(1234) // three pages
	_, err := Run(context.Background(), it.source(), Options{Expect: 1000}, Entries, "discarded", it.take)
	var changed *CountChanged
	if !errors.As(err, &changed) || err.Error() != "1234 entries match now, not 1000: nothing discarded; count them again" || len(it.left) != 1234 {
		t.Fatalf("at the wrong count: %v, %d left", err, len(it.left))
	}
	var seen []Result
	res, err := Run(context.Background(), it.source(), Options{Expect: 1234, Progress: func(r Result) { seen = append(seen, r) }},
		Entries, "discarded", it.take)
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

// A stop takes effect between two items: the one under way completes and
// is counted; the rest are as they were.
func TestRunStopsBetweenItems(t *testing.T) {
	it := newItems(10)
	stop := make(chan struct{})
	res, err := Run(context.Background(), it.source(), Options{Expect: -1, Stop: stop}, Jobs, "cancelled",
		func(ctx context.Context, id int64) error {
			if id == 4 {
				close(stop)
			}
			return it.take(ctx, id)
		})
	if !errors.Is(err, ErrStopped) || res.Done != 4 || len(it.left) != 6 || res.Matching != 10 {
		t.Fatalf("stopped at item 4: %v; done %d, left %d, matching %d; want ErrStopped, 4, 6, 10", err, res.Done, len(it.left), res.Matching)
	}
}
