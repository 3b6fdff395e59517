package broker

import (
	"context"
	"sync"
)

// Produce memory budgets (issue 22). A send's payload is held from the
// moment it is read off its stream until its receipt is queued: in the
// topic's append queue, in the ledger's in-flight window, in the tail
// cache's copy. Without a bound in bytes a producer that sends 5 MiB
// messages faster than the bookies store them held 1.7 GiB of them (count
// bounds only: max_pending_sends of 4096 such sends is 20 GiB).
//
// Each send first takes its payload's size from three budgets, in this
// order: its gRPC connection's (max_inflight_bytes_per_connection), its
// topic's (max_pending_send_bytes) and the broker's
// (max_inflight_produce_bytes). It gives them back when its receipt is
// queued. While a budget is used up the stream's receiving goroutine
// waits, so it stops reading: HTTP/2 flow control pushes back on the
// client, which is back-pressure, not memory. A budget lets one send
// through when it holds nothing, so a send larger than a budget still
// goes (max_message_bytes is validated to fit each budget anyway).
// Budgets are always taken in the same order and released without
// taking any, so waiting cannot deadlock.

// sendOverheadBytes is counted for every send on top of its payload, so
// that empty payloads are bounded too.
const sendOverheadBytes = 256

// byteBudget is a counting semaphore in bytes. Safe for concurrent use.
type byteBudget struct {
	limit int64

	mu   sync.Mutex
	used int64
	// wake is closed (and replaced) whenever bytes are released.
	wake chan struct{}
}

func newByteBudget(limit int64) *byteBudget {
	return &byteBudget{limit: limit, wake: make(chan struct{})}
}

// acquire takes n bytes, waiting while they do not fit; it fails only
// when ctx ends.
func (b *byteBudget) acquire(ctx context.Context, n int64) error {
	for {
		b.mu.Lock()
		if b.used == 0 || b.used+n <= b.limit {
			b.used += n
			b.mu.Unlock()
			return nil
		}
		wake := b.wake
		b.mu.Unlock()
		select {
		case <-wake:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// release gives back n bytes taken by acquire.
func (b *byteBudget) release(n int64) {
	b.mu.Lock()
	b.used -= n
	close(b.wake)
	b.wake = make(chan struct{})
	b.mu.Unlock()
}

// inUse reports the bytes taken.
func (b *byteBudget) inUse() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}

// connBudgets holds one budget per client connection with a producer
// on it; an entry lives while some stream of its connection uses it, so
// the map is bounded by the open connections.
type connBudgets struct {
	limit int64

	mu sync.Mutex
	m  map[string]*connBudget
}

type connBudget struct {
	*byteBudget
	refs int
}

// get returns the budget of connection key, counting a user; put ends
// that use.
func (c *connBudgets) get(key string) *byteBudget {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string]*connBudget{}
	}
	cb := c.m[key]
	if cb == nil {
		cb = &connBudget{byteBudget: newByteBudget(c.limit)}
		c.m[key] = cb
	}
	cb.refs++
	return cb.byteBudget
}

func (c *connBudgets) put(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cb := c.m[key]; cb != nil {
		if cb.refs--; cb.refs <= 0 {
			delete(c.m, key)
		}
	}
}

// sendHold is what one producer stream takes for its sends.
type sendHold struct {
	conn, topic, broker *byteBudget

	mu     sync.Mutex
	held   int64
	closed bool
}

// take acquires n bytes for one send and returns the function that gives
// them back (at most once; after close it does nothing).
func (h *sendHold) take(ctx context.Context, n int64) (func(), error) {
	if err := h.acquire(ctx, n); err != nil {
		return nil, err
	}
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		h.release(n)
		return func() {}, nil
	}
	h.held += n
	h.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			h.mu.Lock()
			if h.closed {
				h.mu.Unlock()
				return
			}
			h.held -= n
			h.mu.Unlock()
			h.release(n)
		})
	}, nil
}

// close gives back whatever the stream's sends still hold (sends whose
// receipt never came: the stream ended first) so a budget never leaks.
func (h *sendHold) close() {
	h.mu.Lock()
	n := h.held
	h.held, h.closed = 0, true
	h.mu.Unlock()
	if n > 0 {
		h.release(n)
	}
}

// acquire takes n bytes from the three budgets in order; on failure it
// gives back what it took.
func (h *sendHold) acquire(ctx context.Context, n int64) error {
	if err := h.conn.acquire(ctx, n); err != nil {
		return err
	}
	if err := h.topic.acquire(ctx, n); err != nil {
		h.conn.release(n)
		return err
	}
	if err := h.broker.acquire(ctx, n); err != nil {
		h.topic.release(n)
		h.conn.release(n)
		return err
	}
	return nil
}

func (h *sendHold) release(n int64) {
	h.broker.release(n)
	h.topic.release(n)
	h.conn.release(n)
}
