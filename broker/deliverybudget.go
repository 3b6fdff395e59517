package broker

import (
	"sync"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
)

// Delivery memory budgets (issue 22). A delivered entry's payload is held
// from the moment dispatch queues it on its consumer's out-queue until the
// stream writer has handed it to gRPC. The out-queue is bounded by count
// (max_permits_per_consumer + 64 responses), but entries of up to 5 MiB
// made that 50 GiB for one consumer that grants permits and never reads
// its stream.
//
// Each delivery takes its payload's size (plus deliveryOverheadBytes) from
// three budgets: its consumer's (max_pending_delivery_bytes_per_consumer),
// its connection's (max_pending_delivery_bytes_per_connection) and the
// broker's (max_pending_delivery_bytes). Dispatch never waits under
// subscription.mu: a level with room takes the whole entry (so it
// overshoots by at most one entry), a full level stops dispatch to that
// consumer, and the subscription waits, off its lock, for a release on the
// full level before its next round. There is no per-topic level: a
// consumer that stops reading would then stall every other subscription
// of its topic.

// deliveryOverheadBytes is counted for every delivery on top of its
// payload, so that empty payloads are bounded too.
const deliveryOverheadBytes = 256

// takeIfRoom takes n bytes when the budget is not full (used < limit),
// even past the limit; it never waits.
func (b *byteBudget) takeIfRoom(n int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.used >= b.limit {
		return false
	}
	b.used += n
	return true
}

// full reports whether the budget has no room, and if so a channel closed
// at the next release.
func (b *byteBudget) full() (bool, <-chan struct{}) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.used < b.limit {
		return false, nil
	}
	return true, b.wake
}

// deliveryHold is what one consumer's deliveries take. Safe for
// concurrent use: dispatch takes (under subscription.mu), the stream
// writer releases.
type deliveryHold struct {
	own, conn, broker *byteBudget

	mu     sync.Mutex
	held   int64
	closed bool
}

// deliverySize is what a response holds: its payload plus the overhead
// for a message, nothing for a control response.
func deliverySize(r *clientv1.ConsumeResponse) int64 {
	m := r.GetMessage()
	if m == nil {
		return 0
	}
	return int64(len(m.GetPayload())) + deliveryOverheadBytes
}

// blocked reports whether some level is full, and if so a channel closed
// when that level next releases bytes. A nil hold is never blocked.
func (h *deliveryHold) blocked() (bool, <-chan struct{}) {
	if h == nil {
		return false, nil // a consumer built by a unit test, never delivered to
	}
	for _, b := range [...]*byteBudget{h.own, h.conn, h.broker} {
		if full, wake := b.full(); full {
			return true, wake
		}
	}
	return false, nil
}

// take takes n bytes from each level in order if each has room; on a full
// level it gives back what it took and reports false.
func (h *deliveryHold) take(n int64) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return false
	}
	if !h.own.takeIfRoom(n) {
		return false
	}
	if !h.conn.takeIfRoom(n) {
		h.own.release(n)
		return false
	}
	if !h.broker.takeIfRoom(n) {
		h.conn.release(n)
		h.own.release(n)
		return false
	}
	h.held += n
	return true
}

// release gives back n bytes of a response the writer sent or dropped
// (nothing after close, which gave back everything).
func (h *deliveryHold) release(n int64) {
	if n == 0 {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return
	}
	h.held -= n
	h.releaseLevels(n)
}

func (h *deliveryHold) releaseLevels(n int64) {
	h.broker.release(n)
	h.conn.release(n)
	h.own.release(n)
}

// close gives back what the consumer's queued responses still hold (its
// stream ended with them unsent) and refuses further takes.
func (h *deliveryHold) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return
	}
	h.closed = true
	if h.held > 0 {
		h.releaseLevels(h.held)
	}
	h.held = 0
}
