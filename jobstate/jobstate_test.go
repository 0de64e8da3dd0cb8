package jobstate

import (
	"slices"
	"testing"
)

// Every state is either final or unfinished, never both.
func TestFinalAndUnfinishedSplitAll(t *testing.T) {
	for _, s := range All {
		if s.IsFinal() == slices.Contains(Unfinished, s) {
			t.Errorf("%s: final %v, unfinished %v", s, s.IsFinal(), slices.Contains(Unfinished, s))
		}
	}
	if len(Final)+len(Unfinished) != len(All) {
		t.Errorf("%d final and %d unfinished states, %d in all", len(Final), len(Unfinished), len(All))
	}
}
