// Package startstop is the lifecycle of a component that runs one loop
// on a goroutine of its own: Start returns once it runs, Stop ends it and
// waits for it, bounded by a context, and may be called any number of
// times. Components embed a Loop rather than writing their own.
package startstop

import (
	"context"
	"sync"
)

// Loop runs one function from Start until Stop.
type Loop struct {
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
}

// Start runs run on a goroutine of its own, with a context that Stop
// cancels (and that ctx's cancellation does not: only its values carry
// over). It returns at once.
func (l *Loop) Start(ctx context.Context, run func(ctx context.Context)) {
	ctx, l.cancel = context.WithCancel(context.WithoutCancel(ctx))
	l.done = make(chan struct{})
	go func() {
		defer close(l.done)
		run(ctx)
	}()
}

// Stop cancels the loop and waits for it to return, or for ctx to end
// (ctx's error then). Idempotent; a Loop never started stops at once.
func (l *Loop) Stop(ctx context.Context) error {
	if l.cancel == nil {
		return nil
	}
	l.once.Do(l.cancel)
	select {
	case <-l.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
