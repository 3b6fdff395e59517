package client

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
)

// Readers and seeks.
//
// A Reader reads a topic from a start position without a durable
// subscription: the broker keeps its cursor in memory only (a non-durable
// subscription), it holds no retention and disappears with the stream.
// When the stream breaks the reader subscribes again at its start and
// skips what it already returned: per origin region it remembers the
// highest origin_seq returned, and a region's log holds each origin's
// entries in origin_seq order, so everything at or below it was seen. An
// entry whose messages were only partly returned is returned again whole.

// ReaderOptions configures a Reader.
type ReaderOptions struct {
	// Topic is "tenant/namespace/topic". Required.
	Topic string
	// Start is where the reader starts (default: latest).
	Start StartPosition
	// Name names the reader's subscription ("" = assigned by the broker).
	Name string
	// ReceiverQueueSize bounds entries buffered in the client. Default 1000.
	ReceiverQueueSize int
}

// Reader reads a topic from a position; safe for concurrent use.
type Reader struct {
	co *Consumer
}

// NewReader opens a reader on its topic's owner. It fails at once on bad
// options or a bad start (an origin position not stored in this region
// gives ErrNotFound naming it) and retries transient errors until ctx ends.
func (c *Client) NewReader(ctx context.Context, opts ReaderOptions) (*Reader, error) {
	if err := opts.Start.validate("Start"); err != nil {
		return nil, err
	}
	start := opts.Start
	co, err := c.Subscribe(ctx, ConsumerOptions{Topic: opts.Topic, Subscription: opts.Name, Type: Exclusive,
		ReceiverQueueSize: opts.ReceiverQueueSize, Start: &start, nonDurable: true})
	if err != nil {
		return nil, err
	}
	return &Reader{co: co}, nil
}

// Topic returns the reader's topic.
func (r *Reader) Topic() string { return r.co.Topic() }

// Next returns the next message, waiting until one arrives or ctx ends.
func (r *Reader) Next(ctx context.Context) (*ReceivedMessage, error) { return r.co.Receive(ctx) }

// Seek restarts the reader at sp: the messages returned after Seek
// returns come from there.
func (r *Reader) Seek(ctx context.Context, sp StartPosition) error { return r.co.Seek(ctx, sp) }

// Close closes the reader (the broker drops its subscription).
func (r *Reader) Close(ctx context.Context) error { return r.co.Close(ctx) }

// readerState is a reader's resume state; guarded by Consumer.mu.
type readerState struct {
	start StartPosition
	// seen: per origin stream (originStream), the highest origin_seq
	// fully returned.
	seen map[string]int64
	// gen grows with every Seek: deliveries queued before it do not
	// update seen.
	gen uint64
}

func newReaderState(start *StartPosition) *readerState {
	rs := &readerState{seen: map[string]int64{}}
	if start != nil {
		rs.start = *start
	}
	return rs
}

// startLocked is the start sent with a Subscribe: a reader's current
// start, or a consumer's Start option. co.mu held.
func (co *Consumer) startLocked() *clientv1.StartPosition {
	if co.reader != nil {
		return co.reader.start.toProto()
	}
	if co.opts.Start != nil {
		return co.opts.Start.toProto()
	}
	return nil
}

// readerSkip tags d with its origin and reports whether a reader already
// returned it (before a reconnect); a skipped entry is acknowledged and
// its permit given back.
func (co *Consumer) readerSkip(stream clientv1.Meridian_ConsumeClient, m *clientv1.Message, d *delivery) bool {
	md := m.GetMetadata()
	d.origin, d.oseq = originStream(md), md.GetOriginSeq()
	co.mu.Lock()
	d.gen = co.reader.gen
	skip := d.oseq > 0 && d.oseq <= co.reader.seen[d.origin]
	co.mu.Unlock()
	if !skip {
		return false
	}
	_ = co.sendReq(stream, &clientv1.ConsumeRequest{Kind: &clientv1.ConsumeRequest_Ack{Ack: &clientv1.Ack{MessageIds: []*clientv1.MessageId{m.GetMessageId()}}}})
	_ = co.sendReq(stream, &clientv1.ConsumeRequest{Kind: &clientv1.ConsumeRequest_Flow{Flow: &clientv1.Flow{Permits: 1}}})
	return true
}

// originStream names the origin stream an entry's origin_seq counts in:
// its origin region and origin incarnation. A topic deleted and written
// again in a region numbers its entries from 1 again under a new
// incarnation, so origin_seq values repeat across incarnations and only
// the pair orders a stream.
func originStream(md *clientv1.EntryMetadata) string {
	if inc := md.GetOriginIncarnation(); inc != 0 {
		return md.GetOriginRegion() + "@" + strconv.FormatUint(inc, 10)
	}
	return md.GetOriginRegion()
}

// readerEntryDone records that a reader returned every message of d and
// acknowledges the entry (without waiting: the broker needs it only to
// keep delivering under its limit of unacknowledged entries).
func (co *Consumer) readerEntryDone(d *delivery) {
	co.mu.Lock()
	if d.gen == co.reader.gen && d.epoch == co.epoch && d.oseq > co.reader.seen[d.origin] {
		co.reader.seen[d.origin] = d.oseq
	}
	stream := co.stream
	co.mu.Unlock()
	if stream == nil || len(d.msgs) == 0 {
		return
	}
	id := d.msgs[0].ID
	_ = co.sendReq(stream, &clientv1.ConsumeRequest{Kind: &clientv1.ConsumeRequest_Ack{Ack: &clientv1.Ack{
		MessageIds: []*clientv1.MessageId{{LedgerId: id.LedgerID, EntryId: id.EntryID}}}}})
}

// Seek moves the subscription (every consumer of it; the broker
// disconnects the others, which reconnect) to sp, as Pulsar's seek:
// afterwards the next message received is the one sp names, messages
// acknowledged after it are delivered again and those before it count
// acknowledged. On a replicated subscription the move applies in every
// region. Messages buffered before the seek are dropped: Seek returns once
// the consumer receives from the new position. A reader restarts at sp.
func (co *Consumer) Seek(ctx context.Context, sp StartPosition) error {
	if co.part != nil {
		return co.part.seek(ctx, sp)
	}
	if err := co.checkOpen(); err != nil {
		return err
	}
	if err := sp.validate("Seek position"); err != nil {
		return err
	}
	if co.reader != nil {
		co.mu.Lock()
		old := co.epoch
		stream := co.stream
		co.reader.start = sp
		co.reader.seen = map[string]int64{}
		co.reader.gen++
		co.mu.Unlock()
		return co.restartStream(ctx, stream, old)
	}
	for {
		stream, err := co.waitStream(ctx)
		if err != nil {
			return err
		}
		req := co.nextReq.Add(1)
		ch := make(chan error, 1)
		co.mu.Lock()
		if co.stream != stream {
			co.mu.Unlock()
			continue
		}
		old := co.epoch
		co.ackWait[req] = ch
		co.mu.Unlock()
		if err := co.sendReq(stream, &clientv1.ConsumeRequest{Kind: &clientv1.ConsumeRequest_Seek{Seek: &clientv1.Seek{Position: sp.toProto(), RequestId: req}}}); err != nil {
			co.mu.Lock()
			delete(co.ackWait, req)
			co.mu.Unlock()
			if werr := sleepCtx(ctx, 10*time.Millisecond); werr != nil {
				return werr
			}
			continue
		}
		select {
		case err := <-ch:
			if errors.Is(err, errStreamBroken) {
				continue // a seek is idempotent: do it again on the new stream
			}
			if err != nil {
				return fmt.Errorf("seek to %s: %w", sp, userError(err))
			}
			co.mu.Lock()
			co.batches = map[entryKey]*batchAcks{}
			co.mu.Unlock()
			return co.restartStream(ctx, stream, old)
		case <-ctx.Done():
			co.mu.Lock()
			delete(co.ackWait, req)
			co.mu.Unlock()
			return ctx.Err()
		case <-co.ctx.Done():
			return ErrConsumerClosed
		}
	}
}

// restartStream ends stream (the run loop subscribes again at once) and
// waits until a stream newer than epoch old serves, so that nothing
// received before is handed out (Receive drops older deliveries).
func (co *Consumer) restartStream(ctx context.Context, stream clientv1.Meridian_ConsumeClient, old uint64) error {
	if cs, ok := stream.(*cancelConsume); ok {
		co.restarting.Store(true)
		cs.cancel()
	}
	for {
		co.mu.Lock()
		epoch, cur, fatal := co.epoch, co.stream, co.fatal
		co.mu.Unlock()
		if cur != nil && epoch > old {
			return nil
		}
		if fatal != nil {
			return fatal
		}
		if err := sleepCtx(ctx, 5*time.Millisecond); err != nil {
			return err
		}
		if co.ctx.Err() != nil {
			return ErrConsumerClosed
		}
	}
}
