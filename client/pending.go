package client

import (
	"context"
)

// pendingLimiter bounds how many messages a producer holds unresolved
// (in the open batch, in flight, or waiting for a resend). It is the
// producer's back-pressure: a full limiter blocks or fails the caller
// instead of letting memory grow.
type pendingLimiter struct {
	slots chan struct{}
	block bool
}

func newPendingLimiter(max int, block bool) *pendingLimiter {
	return &pendingLimiter{slots: make(chan struct{}, max), block: block}
}

// acquire takes one slot. When full it waits (block) until a slot frees,
// ctx ends (ctx.Err()) or closed is closed (ErrProducerClosed); without
// block it fails at once with ErrProducerQueueFull.
func (l *pendingLimiter) acquire(ctx context.Context, closed <-chan struct{}) error {
	select {
	case l.slots <- struct{}{}:
		return nil
	default:
	}
	if !l.block {
		return ErrProducerQueueFull
	}
	select {
	case l.slots <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-closed:
		return ErrProducerClosed
	}
}

// release returns n slots.
func (l *pendingLimiter) release(n int) {
	for range n {
		<-l.slots
	}
}

// inUse reports how many slots are taken.
func (l *pendingLimiter) inUse() int { return len(l.slots) }
