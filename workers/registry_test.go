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

// A nil handler is refused when it is registered, a nil HandlerFunc too:
// wrapped in the Handler interface it is not nil, and it would panic on
// every attempt of its kind instead.
func TestRegisterRefusesNilHandlers(t *testing.T) {
	var f HandlerFunc // say, a field of the program's never set
	for name, h := range map[string]Handler{"nil Handler": nil, "nil HandlerFunc": f} {
		var r Registry
		if err := r.Register("k", h); err == nil {
			t.Errorf("%s: registered", name)
		}
		if _, ok := r.Lookup("k"); ok {
			t.Errorf("%s: found by Lookup", name)
		}
	}
}
