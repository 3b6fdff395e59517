// Package budget is a counting semaphore in bytes: the memory bound of a
// queue or a stream whose items differ in size (issue 22, "memory bounded
// in bytes").
//
// A Budget of limit L hands out at most L bytes at a time, with one
// exception: an acquire of n > L bytes goes through once nothing is held,
// so an item larger than the whole budget is delayed, never deadlocked.
// The bytes held are therefore at most max(L, the largest single item).
//
// Waiters are served in arrival order (FIFO): a large item is not starved
// by a stream of small ones that would fit before it. A waiter whose
// context ends leaves the queue and takes nothing.
package budget

import (
	"container/list"
	"context"
	"fmt"
	"sync"
)

// Budget is a counting semaphore in bytes. Safe for concurrent use; the
// zero value is not usable, call New.
type Budget struct {
	limit int64

	mu      sync.Mutex
	used    int64
	peak    int64
	waiters list.List // of *waiter, in arrival order
}

type waiter struct {
	n     int64
	ready chan struct{} // closed once the bytes are granted
}

// New returns a budget of limit bytes; limit must be >= 1.
func New(limit int64) *Budget {
	if limit < 1 {
		panic(fmt.Sprintf("budget: limit must be >= 1, got %d", limit))
	}
	return &Budget{limit: limit}
}

// Limit returns the budget's limit in bytes.
func (b *Budget) Limit() int64 { return b.limit }

// fits reports whether n more bytes may be taken now. Caller holds b.mu.
func (b *Budget) fits(n int64) bool { return b.used == 0 || b.used+n <= b.limit }

func (b *Budget) take(n int64) {
	b.used += n
	b.peak = max(b.peak, b.used)
}

// Acquire takes n bytes (n >= 0), waiting behind earlier waiters and while
// they do not fit. It fails only when ctx ends first, returning ctx.Err()
// and taking nothing.
func (b *Budget) Acquire(ctx context.Context, n int64) error {
	if n < 0 {
		panic(fmt.Sprintf("budget: Acquire of %d bytes", n))
	}
	b.mu.Lock()
	if b.waiters.Len() == 0 && b.fits(n) {
		b.take(n)
		b.mu.Unlock()
		return nil
	}
	if err := ctx.Err(); err != nil {
		b.mu.Unlock()
		return err
	}
	w := &waiter{n: n, ready: make(chan struct{})}
	e := b.waiters.PushBack(w)
	b.mu.Unlock()

	select {
	case <-w.ready:
		return nil
	case <-ctx.Done():
		b.mu.Lock()
		select {
		case <-w.ready:
			// Granted while ctx ended: give it back, report the end.
			b.used -= n
			b.notifyLocked()
		default:
			front := b.waiters.Front() == e
			b.waiters.Remove(e)
			if front {
				// The waiters behind it may fit now.
				b.notifyLocked()
			}
		}
		b.mu.Unlock()
		return ctx.Err()
	}
}

// TryAcquire takes n bytes if that is possible without waiting.
func (b *Budget) TryAcquire(n int64) bool {
	if n < 0 {
		panic(fmt.Sprintf("budget: TryAcquire of %d bytes", n))
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.waiters.Len() == 0 && b.fits(n) {
		b.take(n)
		return true
	}
	return false
}

// Release gives back n bytes taken by Acquire or TryAcquire and wakes the
// waiters that fit now, in order.
func (b *Budget) Release(n int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if n < 0 || n > b.used {
		panic(fmt.Sprintf("budget: Release of %d bytes with %d held", n, b.used))
	}
	b.used -= n
	b.notifyLocked()
}

func (b *Budget) notifyLocked() {
	for {
		e := b.waiters.Front()
		if e == nil {
			return
		}
		w := e.Value.(*waiter)
		if !b.fits(w.n) {
			return
		}
		b.take(w.n)
		b.waiters.Remove(e)
		close(w.ready)
	}
}

// InUse returns the bytes held now.
func (b *Budget) InUse() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}

// Peak returns the most bytes held at once since New or the last
// ResetPeak.
func (b *Budget) Peak() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.peak
}

// ResetPeak sets the peak to the bytes held now.
func (b *Budget) ResetPeak() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.peak = b.used
}

// Waiting returns how many acquires are waiting.
func (b *Budget) Waiting() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.waiters.Len()
}
