package client

import (
	"time"
)

// pendingMsg is one accepted message waiting for its receipt.
type pendingMsg struct {
	msg      *Message
	seq      int64
	callback func(MessageID, *Message, error)
	accepted time.Time // when SendAsync accepted it; the send timeout starts here
	// deliverAt is the message's resolved delivery time (Unix ms, 0 = at
	// once; Message.DeliverAt/DeliverAfter taken at acceptance).
	deliverAt int64
}

// batch is a group of messages sent as one entry. The receipt for the
// entry resolves every message in it.
type batch struct {
	msgs  []pendingMsg
	bytes int
	// payload is the encoded (and compressed) entry, set when the batch
	// is closed; it is resent unchanged after a reconnect so that the
	// broker sees the same sequence IDs and content.
	payload []byte
	usize   int64 // serialized size before compression
	// duplicate is set when the broker answered that it had already
	// stored the batch.
	duplicate bool
}

func (b *batch) firstSeq() int64 { return b.msgs[0].seq }
func (b *batch) lastSeq() int64  { return b.msgs[len(b.msgs)-1].seq }

// replication returns the batch's replication options (its messages all
// have the same; see batchBuilder.add).
func (b *batch) replication() (to []string, disable bool) {
	m := b.msgs[0].msg
	return m.ReplicateTo, m.DisableReplication
}

// key is the key of every message of the batch (see batchBuilder.add).
func (b *batch) key() string { return b.msgs[0].msg.Key }

// deliverAt is the delivery time of every message of the batch.
func (b *batch) deliverAt() int64 { return b.msgs[0].deliverAt }

// oldest is when the batch's first message was accepted.
func (b *batch) oldest() time.Time { return b.msgs[0].accepted }

// batchBuilder accumulates messages into batches bounded by count and
// bytes. It is pure logic (no I/O, no timers, no locking): the producer
// holds its lock around calls.
type batchBuilder struct {
	maxMessages int
	maxBytes    int
	cur         *batch
}

func newBatchBuilder(maxMessages, maxBytes int) *batchBuilder {
	return &batchBuilder{maxMessages: maxMessages, maxBytes: maxBytes}
}

// add appends m. It returns the batch that had to be closed BEFORE m was
// added (because m would not fit, or differs from the batch in replication
// options, key or delivery time: one batch is one entry, replicated,
// routed and delivered as a whole), or nil, and whether the batch that now
// holds m is full and must be closed right away.
func (bb *batchBuilder) add(m pendingMsg) (closed *batch, full bool) {
	sz := m.msg.size()
	if bb.cur != nil && (bb.cur.bytes+sz > bb.maxBytes || !sameBatch(bb.cur.msgs[0], m)) {
		closed = bb.cur
		bb.cur = nil
	}
	if bb.cur == nil {
		bb.cur = &batch{}
	}
	bb.cur.msgs = append(bb.cur.msgs, m)
	bb.cur.bytes += sz
	full = len(bb.cur.msgs) >= bb.maxMessages || bb.cur.bytes >= bb.maxBytes
	return closed, full
}

// take closes and returns the open batch (nil when empty).
func (bb *batchBuilder) take() *batch {
	b := bb.cur
	bb.cur = nil
	return b
}

// empty reports whether no batch is open.
func (bb *batchBuilder) empty() bool { return bb.cur == nil }

// len is the number of messages in the open batch.
func (bb *batchBuilder) len() int {
	if bb.cur == nil {
		return 0
	}
	return len(bb.cur.msgs)
}
