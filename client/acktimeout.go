package client

import "time"

// Ack timeout (ConsumerOptions.AckTimeout, off by default): the consumer
// notes when the first message of each entry is returned by Receive; an
// entry not acknowledged as a whole (nor nacked) within the timeout is
// redelivered by the broker (redeliveryLoop in nack.go asks for it), with
// its redelivery count raised, like a nack. As in Pulsar the timer runs
// from receipt by the application, not from the broker's dispatch.

// noteReceived starts the ack timeout of msg's entry (once per delivery).
func (co *Consumer) noteReceived(id MessageID) {
	if co.opts.AckTimeout <= 0 {
		return
	}
	k := entryKey{id.LedgerID, id.EntryID}
	rt := co.rt
	rt.mu.Lock()
	first := len(rt.received) == 0
	if _, ok := rt.received[k]; !ok {
		if _, nacked := rt.nacked[k]; !nacked {
			rt.received[k] = time.Now()
		}
	}
	rt.mu.Unlock()
	if first {
		// Later entries time out after the ones already tracked: the loop
		// needs waking only for the first.
		rt.kick()
	}
}

// clearReceived forgets every ack-timeout start (a new stream).
func (rt *redeliveryTracker) clearReceived() {
	rt.mu.Lock()
	clear(rt.received)
	rt.mu.Unlock()
}
