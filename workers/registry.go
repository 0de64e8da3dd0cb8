package workers

import (
	"fmt"
	"sync"
)

// Registry maps job kinds to in-process Go handlers (routes with
// target: {go: true}).
type Registry struct {
	mu       sync.RWMutex
	handlers map[string]Handler
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{handlers: map[string]Handler{}} }

// Register adds the handler for kind. Registering a kind twice is an
// error: two handlers for one kind is always a wiring bug. So is a nil
// handler, a nil HandlerFunc included.
func (r *Registry) Register(kind string, h Handler) error {
	if kind == "" {
		return fmt.Errorf("register handler: kind is empty")
	}
	// A nil HandlerFunc is a non-nil Handler that panics on every
	// attempt: each would fail as a recovered panic until the job died.
	if f, ok := h.(HandlerFunc); h == nil || ok && f == nil {
		return fmt.Errorf("register handler %q: handler is nil", kind)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, dup := r.handlers[kind]; dup {
		return fmt.Errorf("register handler %q: a handler for this kind is already registered", kind)
	}
	if r.handlers == nil { // a zero Registry is ready to use
		r.handlers = map[string]Handler{}
	}
	r.handlers[kind] = h
	return nil
}

// Lookup returns the handler for kind.
func (r *Registry) Lookup(kind string) (Handler, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	h, ok := r.handlers[kind]
	return h, ok
}
