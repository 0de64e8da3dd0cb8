package startstop

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestLoop(t *testing.T) {
	var never Loop
	if err := never.Stop(context.Background()); err != nil {
		t.Fatalf("Stop of a Loop never started: %v", err)
	}
	var l Loop
	release := make(chan struct{})
	l.Start(context.Background(), func(ctx context.Context) {
		<-ctx.Done()
		<-release // a round that outlives its cancellation
	})
	short, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if err := l.Stop(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Stop while the loop runs on: %v, want the context's error", err)
	}
	close(release)
	if err := l.Stop(context.Background()); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
}
