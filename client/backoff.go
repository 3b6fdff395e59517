package client

import (
	"context"
	"math/rand/v2"
	"time"
)

// backoff yields exponentially growing delays with jitter, capped at max.
// Not safe for concurrent use.
type backoff struct {
	initial, max time.Duration
	next         time.Duration
}

func newBackoff(initial, max time.Duration) *backoff {
	return &backoff{initial: initial, max: max, next: initial}
}

// delay returns the next delay: the current step with ±20% jitter, then
// doubles the step up to max. Jitter keeps many clients that lost the same
// broker from reconnecting in lock step.
func (b *backoff) delay() time.Duration {
	d := b.next
	b.next *= 2
	if b.next > b.max {
		b.next = b.max
	}
	if d <= 0 {
		return 0
	}
	j := time.Duration(rand.Int64N(int64(d)/5+1)) * 2
	return d - d/5 + j
}

// reset starts over at the initial delay (after a success).
func (b *backoff) reset() { b.next = b.initial }

// wait sleeps for the next delay or until ctx ends.
func (b *backoff) wait(ctx context.Context) error {
	t := time.NewTimer(b.delay())
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
