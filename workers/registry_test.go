package workers

import (
	"context"
	"testing"
)

// A zero Registry is ready to use, as NewRegistry's is.
func TestZeroRegistry(t *testing.T) {
	var r Registry
	if err := r.Register("k", HandlerFunc(func(context.Context, *Job) error { return nil })); err != nil {
		t.Fatal(err)
	}
	if _, ok := r.Lookup("k"); !ok {
		t.Error("the registered handler is not found")
	}
	if _, ok := r.Lookup("other"); ok {
		t.Error("a kind never registered is found")
	}
}
