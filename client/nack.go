package client

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
)

// DefaultNackRedeliveryDelay is ConsumerOptions.NackRedeliveryDelay's
// default, as in Pulsar.
const DefaultNackRedeliveryDelay = time.Minute

// Limits of the acknowledgement options.
const (
	// MaxNackRedeliveryDelay bounds NackRedeliveryDelay and NackBackoff.Max.
	MaxNackRedeliveryDelay = 24 * time.Hour
	// MinAckTimeout is the smallest non-zero AckTimeout (Pulsar's).
	MinAckTimeout = time.Second
	// MaxAckTimeout bounds AckTimeout.
	MaxAckTimeout = 24 * time.Hour
	// MaxDeadLetterRedeliveries bounds DeadLetterPolicy.MaxRedeliveries.
	MaxDeadLetterRedeliveries = 1_000_000
)

// NackBackoff makes the redelivery delay of a negatively acknowledged
// message grow with its redelivery count r: Min × Multiplier^r, at most
// Max (Pulsar's MultiplierRedeliveryBackoff).
type NackBackoff struct {
	// Min is the delay of a message's first nack (redelivery count 0).
	// Range [1ms, Max].
	Min time.Duration
	// Max caps the delay. Range [Min, 24h].
	Max time.Duration
	// Multiplier is the growth per redelivery. Range [1, 100]; 0 means 2.
	Multiplier float64
}

// Delay returns the redelivery delay of a message delivered with
// redelivery count r.
func (b *NackBackoff) Delay(r int32) time.Duration {
	m := b.Multiplier
	if m == 0 {
		m = 2
	}
	d := float64(b.Min) * math.Pow(m, float64(max(r, 0)))
	if d >= float64(b.Max) || math.IsInf(d, 0) || math.IsNaN(d) {
		return b.Max
	}
	return time.Duration(d)
}

// validateAcks checks the nack, ack-timeout and dead-letter options.
func (o ConsumerOptions) validateAcks() error {
	if o.NackRedeliveryDelay < time.Millisecond || o.NackRedeliveryDelay > MaxNackRedeliveryDelay {
		return fmt.Errorf("%w: NackRedeliveryDelay %v out of range [1ms, %v]", ErrInvalidArgument, o.NackRedeliveryDelay, MaxNackRedeliveryDelay)
	}
	if b := o.NackBackoff; b != nil {
		if b.Min < time.Millisecond || b.Min > b.Max {
			return fmt.Errorf("%w: NackBackoff.Min %v out of range [1ms, Max=%v]", ErrInvalidArgument, b.Min, b.Max)
		}
		if b.Max > MaxNackRedeliveryDelay {
			return fmt.Errorf("%w: NackBackoff.Max %v above the limit %v", ErrInvalidArgument, b.Max, MaxNackRedeliveryDelay)
		}
		if b.Multiplier != 0 && (b.Multiplier < 1 || b.Multiplier > 100) {
			return fmt.Errorf("%w: NackBackoff.Multiplier %v out of range [1, 100] (0 = 2)", ErrInvalidArgument, b.Multiplier)
		}
	}
	if o.AckTimeout != 0 && (o.AckTimeout < MinAckTimeout || o.AckTimeout > MaxAckTimeout) {
		return fmt.Errorf("%w: AckTimeout %v out of range: 0 (off) or [%v, %v]", ErrInvalidArgument, o.AckTimeout, MinAckTimeout, MaxAckTimeout)
	}
	if o.DeadLetter != nil {
		if o.nonDurable {
			return fmt.Errorf("%w: DeadLetter needs a durable subscription, not a reader", ErrInvalidArgument)
		}
		if err := o.DeadLetter.validate(o); err != nil {
			return err
		}
	}
	return nil
}

// redeliveryTracker holds the consumer's nacked entries until their
// redelivery is due, and, with an ack timeout, when each unacknowledged
// entry was first received. Both are bounded by the entries delivered and
// not acknowledged (the broker's per-consumer limit).
type redeliveryTracker struct {
	mu       sync.Mutex
	nacked   map[entryKey]nackDue
	received map[entryKey]time.Time // AckTimeout only
	counts   map[entryKey]int32     // redelivery count at the last delivery
	wake     chan struct{}
	// next is when the loop wakes up next: a nack due earlier wakes it.
	next time.Time
}

type nackDue struct {
	at  time.Time
	gen uint64
}

func newRedeliveryTracker() *redeliveryTracker {
	return &redeliveryTracker{nacked: map[entryKey]nackDue{}, received: map[entryKey]time.Time{},
		counts: map[entryKey]int32{}, wake: make(chan struct{}, 1)}
}

func (rt *redeliveryTracker) kick() {
	select {
	case rt.wake <- struct{}{}:
	default:
	}
}

// delivered records the redelivery count of a delivered entry (only
// NackBackoff reads it: the caller skips it otherwise, so that a consumer
// that never acks, such as a reader, does not accumulate counts).
func (rt *redeliveryTracker) delivered(k entryKey, count int32) {
	rt.mu.Lock()
	rt.counts[k] = count
	rt.mu.Unlock()
}

// forget drops an entry acknowledged as a whole.
func (rt *redeliveryTracker) forget(k entryKey) {
	rt.mu.Lock()
	delete(rt.nacked, k)
	delete(rt.received, k)
	delete(rt.counts, k)
	rt.mu.Unlock()
}

// forgetUpTo drops every entry up to and including id (a cumulative ack).
func (rt *redeliveryTracker) forgetUpTo(id MessageID) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	before := func(k entryKey) bool {
		return (MessageID{LedgerID: k.ledger, EntryID: k.entry}).Compare(MessageID{LedgerID: id.LedgerID, EntryID: id.EntryID}) <= 0
	}
	for k := range rt.nacked {
		if before(k) {
			delete(rt.nacked, k)
		}
	}
	for k := range rt.received {
		if before(k) {
			delete(rt.received, k)
		}
	}
	for k := range rt.counts {
		if before(k) {
			delete(rt.counts, k)
		}
	}
}

// Nack tells the broker that the message id could not be processed: its
// entry (the whole batch, less the messages acknowledged by index) is
// redelivered after NackRedeliveryDelay (or the NackBackoff delay of its
// redelivery count), with a higher redelivery count. It is best effort:
// if the stream breaks meanwhile the entry comes back anyway after the
// reconnect, since it was never acknowledged.
func (co *Consumer) Nack(ctx context.Context, id MessageID) error {
	if co.part != nil {
		return co.part.nack(ctx, id)
	}
	if err := co.checkOpen(); err != nil {
		return err
	}
	if t := co.target(id); t != co {
		return t.Nack(ctx, id) // a retried message (retry.go)
	}
	gen, stale := co.ackGen(id)
	if stale {
		return nil // delivered by a region the client has left
	}
	co.c.metrics.nacked.Inc()
	k := entryKey{id.LedgerID, id.EntryID}
	rt := co.rt
	rt.mu.Lock()
	delay := co.opts.NackRedeliveryDelay
	if b := co.opts.NackBackoff; b != nil {
		delay = b.Delay(rt.counts[k])
	}
	delete(rt.received, k) // the ack timeout no longer applies
	wake := false
	if _, ok := rt.nacked[k]; !ok {
		at := time.Now().Add(delay)
		rt.nacked[k] = nackDue{at: at, gen: gen}
		wake = at.Before(rt.next)
	}
	rt.mu.Unlock()
	if wake {
		rt.kick() // otherwise the loop is due first anyway
	}
	return nil
}

// redeliveryLoop asks the broker to redeliver nacked entries when due and
// entries unacknowledged past the ack timeout, until the consumer closes.
func (co *Consumer) redeliveryLoop() {
	rt := co.rt
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		now := time.Now()
		var due []entryKey
		var timedOut int
		next := now.Add(time.Hour)
		co.mu.Lock()
		curGen := co.gen
		co.mu.Unlock()
		rt.mu.Lock()
		for k, d := range rt.nacked {
			if d.gen != curGen {
				delete(rt.nacked, k) // another region's entry: redelivered there
				continue
			}
			if !d.at.After(now) {
				due = append(due, k)
				delete(rt.nacked, k)
			} else if d.at.Before(next) {
				next = d.at
			}
		}
		if to := co.opts.AckTimeout; to > 0 {
			for k, t := range rt.received {
				if at := t.Add(to); !at.After(now) {
					due = append(due, k)
					delete(rt.received, k)
					timedOut++
				} else if at.Before(next) {
					next = at
				}
			}
		}
		rt.next = next
		rt.mu.Unlock()
		if len(due) > 0 {
			co.askRedeliver(due, timedOut)
		}
		timer.Reset(max(time.Until(next), time.Millisecond))
		select {
		case <-co.ctx.Done():
			return
		case <-rt.wake:
		case <-timer.C:
		}
	}
}

// askRedeliver sends one Redeliver for keys on the current stream. With no
// stream the broker redelivers them after the reconnect anyway.
func (co *Consumer) askRedeliver(keys []entryKey, timedOut int) {
	co.mu.Lock()
	stream := co.stream
	co.mu.Unlock()
	if stream == nil {
		return
	}
	ids := make([]*clientv1.MessageId, 0, len(keys))
	for _, k := range keys {
		ids = append(ids, &clientv1.MessageId{LedgerId: k.ledger, EntryId: k.entry})
	}
	if timedOut > 0 {
		co.log.Debug("ack timeout: redelivering", "entries", timedOut)
	}
	if err := co.sendReq(stream, &clientv1.ConsumeRequest{Kind: &clientv1.ConsumeRequest_Redeliver{Redeliver: &clientv1.Redeliver{MessageIds: ids}}}); err != nil {
		co.log.Debug("redeliver not sent; the reconnect redelivers", "err", err)
	}
}

// batchAckGroupDelay is how long batch-index acknowledgements wait to be
// sent together (Pulsar groups acknowledgements for 100 ms; a shorter
// window keeps redeliveries of acknowledged messages rare).
const batchAckGroupDelay = 10 * time.Millisecond

// batchAckGroup holds batch-index acknowledgements not sent yet.
type batchAckGroup struct {
	mu sync.Mutex
	// pending: per entry, the switch generation it was delivered in (an
	// ack is never sent to another region: positions differ) and indexes.
	pending map[entryKey]*pendingIdx
	timer   *time.Timer
	sent    bool // some were sent fire and forget: Close confirms them
}

type pendingIdx struct {
	gen uint64
	idx []int32
}

// ackBatchIndex records that message id of a multi-message entry is
// acknowledged while others of the entry are not. The indexes are sent
// grouped, fire and forget, within batchAckGroupDelay (or with the next
// acknowledgement, or at Close, which waits for the broker). If they are
// lost the message comes back and the client skips it as long as it
// remembers the batch, else hands it out again: at least once.
func (co *Consumer) ackBatchIndex(id MessageID, gen uint64) {
	g := &co.idxAcks
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.pending == nil {
		g.pending = map[entryKey]*pendingIdx{}
	}
	k := entryKey{id.LedgerID, id.EntryID}
	p := g.pending[k]
	if p == nil || p.gen != gen {
		p = &pendingIdx{gen: gen}
		g.pending[k] = p
	}
	p.idx = append(p.idx, id.BatchIndex)
	if g.timer == nil {
		g.timer = time.AfterFunc(batchAckGroupDelay, co.flushBatchAcks)
	}
}

// take removes the pending batch-index acks and returns those of switch
// generation gen (the others belong to a region the client has left).
func (g *batchAckGroup) take(gen uint64) []*clientv1.BatchIndexAck {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.timer != nil {
		g.timer.Stop()
		g.timer = nil
	}
	var out []*clientv1.BatchIndexAck
	for k, p := range g.pending {
		if p.gen == gen {
			out = append(out, &clientv1.BatchIndexAck{LedgerId: k.ledger, EntryId: k.entry, BatchIndexes: p.idx})
		}
	}
	g.pending = nil
	return out
}

// drop forgets the pending indexes of an entry acknowledged as a whole.
func (g *batchAckGroup) drop(k entryKey) {
	g.mu.Lock()
	delete(g.pending, k)
	g.mu.Unlock()
}

// flushBatchAcks sends the pending batch-index acks on the current stream
// (fire and forget). Without a stream they stay pending: the next
// stream's serve sends them.
func (co *Consumer) flushBatchAcks() {
	co.mu.Lock()
	stream, gen := co.stream, co.gen
	co.mu.Unlock()
	g := &co.idxAcks
	if stream == nil {
		g.mu.Lock()
		g.timer = nil
		g.mu.Unlock()
		return
	}
	acks := g.take(gen)
	if len(acks) == 0 {
		return
	}
	g.mu.Lock()
	g.sent = true
	g.mu.Unlock()
	if err := co.sendReq(stream, &clientv1.ConsumeRequest{Kind: &clientv1.ConsumeRequest_Ack{Ack: &clientv1.Ack{BatchIndexAcks: acks}}}); err != nil {
		co.log.Debug("batch-index acks not sent; their messages may be redelivered", "err", err)
	}
}

// confirmBatchAcks sends the pending batch-index acks and waits until the
// broker applied them and every one sent before (Close: a cancelled
// stream could drop what is still buffered). One try on the current
// stream, at most confirmAtCloseTimeout: without an answer the messages
// may be redelivered, which at-least-once allows.
func (co *Consumer) confirmBatchAcks(ctx context.Context) {
	g := &co.idxAcks
	co.mu.Lock()
	gen, stream := co.gen, co.stream
	co.mu.Unlock()
	acks := g.take(gen)
	g.mu.Lock()
	sent := g.sent
	g.sent = false
	g.mu.Unlock()
	if len(acks) == 0 && !sent || stream == nil {
		return
	}
	req := co.nextReq.Add(1)
	ch := make(chan error, 1)
	co.mu.Lock()
	if co.stream != stream {
		co.mu.Unlock()
		return
	}
	co.ackWait[req] = ch
	co.mu.Unlock()
	defer func() {
		co.mu.Lock()
		delete(co.ackWait, req)
		co.mu.Unlock()
	}()
	if err := co.sendReq(stream, &clientv1.ConsumeRequest{Kind: &clientv1.ConsumeRequest_Ack{Ack: &clientv1.Ack{RequestId: req, BatchIndexAcks: acks}}}); err != nil {
		return
	}
	t := time.NewTimer(confirmAtCloseTimeout)
	defer t.Stop()
	select {
	case err := <-ch:
		if err != nil {
			co.log.Debug("batch-index acks not confirmed at close", "err", err)
		}
	case <-t.C:
	case <-ctx.Done():
	case <-co.ctx.Done():
	}
}

// confirmAtCloseTimeout bounds how long Close waits for the broker to
// confirm the batch-index acks.
const confirmAtCloseTimeout = 2 * time.Second
