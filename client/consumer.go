package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
)

// Consumer receives messages of one subscription. The broker pushes whole
// entries (batches) under flow-control permits; the consumer splits them
// into messages, buffers at most ReceiverQueueSize entries and grants new
// permits as Receive drains the buffer. Safe for concurrent use.
//
// Delivery: at least once. Unacknowledged messages are delivered again
// after a reconnect or to another consumer after Close. When the stream
// breaks, the consumer looks the topic up again and resubscribes with
// backoff; buffered, not yet received messages of the old stream are
// dropped (the broker sends them again).
type Consumer struct {
	c    *Client
	opts ConsumerOptions
	log  *slog.Logger

	ctx     context.Context // lives until Close
	cancel  context.CancelFunc
	queue   chan *delivery // at most ReceiverQueueSize entries
	doneCh  chan struct{}  // closed when the run loop exits
	nextReq atomic.Uint64
	active  atomic.Bool
	// schemaVersion is Subscribed.schema_version (schema.go).
	schemaVersion atomic.Int32
	// restarting: Seek ends the current stream on purpose (reader.go).
	restarting atomic.Bool

	closeOnce sync.Once
	closeErr  error

	// recvMu serializes Receive; it guards cur. It is never held while
	// taking mu for long, and serve never takes it.
	recvMu sync.Mutex
	cur    *delivery

	// sendMu serializes Send on the current stream.
	sendMu sync.Mutex

	// mu guards the fields below.
	mu        sync.Mutex
	name      string
	epoch     uint64                          // incremented on every (re)connect
	stream    clientv1.Meridian_ConsumeClient // nil while disconnected
	connected chan struct{}                   // closed while stream != nil
	ackWait   map[uint64]chan error           // ack request ID -> answer
	unsubWait chan error
	batches   map[entryKey]*batchAcks // partially acknowledged batches
	lastEntry MessageID               // last entry delivered on this stream
	flowDue   uint32                  // entries fully received since the last Flow
	fatal     error
	reader    *readerState // non-nil for a reader (reader.go)
	// gen is the client's switch generation of the stream; deliveredGen
	// (multi-region clients only) is the generation each unacknowledged
	// entry was last delivered in: an ack of an entry delivered by a region
	// the client has left is dropped, never sent to another region.
	gen          uint64
	deliveredGen map[entryKey]uint64

	// part, for a partitioned topic, holds the partitions' consumers and
	// every public method delegates to it (partitioned_consumer.go).
	part *partitionedConsumer
	// rt tracks nacked entries and ack timeouts (nack.go, acktimeout.go);
	// letters holds the dead-letter and retry producers (dlq.go).
	rt      *redeliveryTracker
	letters letterProducers
	// idxAcks groups batch-index acknowledgements (nack.go).
	idxAcks batchAckGroup
	// retry is the retry-topic consumer (retry.go; nil without
	// DeadLetter.EnableRetry, set before Subscribe returns); retryLedgers
	// (guarded by mu) are its ledgers, to route acks.
	retry        *retryState
	retryLedgers map[int64]bool
}

// delivery is one entry split into messages.
type delivery struct {
	epoch uint64
	msgs  []*ReceivedMessage
	next  int
	// origin, oseq and gen serve readers (reader.go).
	origin string
	oseq   int64
	gen    uint64
	// poison, when set, is an entry the client could not decode (msgs is
	// empty; poison.go).
	poison *poisonEntry
}

type entryKey struct{ ledger, entry int64 }

// batchAcks tracks acknowledgements inside one multi-message entry; the
// broker acknowledges whole entries, so the entry is acked only when every
// message of it is.
type batchAcks struct {
	acked []bool
	left  int
	prev  MessageID // entry delivered before this one (for cumulative acks)
	hasPv bool
}

// maxTrackedBatches is where the consumer warns about partially
// acknowledged batches. It never forgets one (that could acknowledge
// unprocessed messages of the batch); their number is bounded by the
// broker's limit of unacknowledged entries per consumer.
const maxTrackedBatches = 100_000

// Subscribe looks the topic up, subscribes on its owner and grants the
// initial permits. It fails at once on bad options or a permanent broker
// error (invalid name, Exclusive subscription busy) and retries transient
// ones until ctx ends.
func (c *Client) Subscribe(ctx context.Context, opts ConsumerOptions) (*Consumer, error) {
	if co, ok, err := c.newPartitionedConsumer(ctx, opts); ok {
		return co, err
	}
	return c.subscribe(ctx, opts)
}

// subscribe subscribes to one (non-partitioned) topic.
func (c *Client) subscribe(ctx context.Context, opts ConsumerOptions) (*Consumer, error) {
	opts = opts.withDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if err := c.checkOpen(); err != nil {
		return nil, err
	}
	cctx, cancel := context.WithCancel(context.Background())
	co := &Consumer{
		c:         c,
		opts:      opts,
		log:       c.log.With("topic", opts.Topic, "subscription", opts.Subscription),
		ctx:       cctx,
		cancel:    cancel,
		queue:     make(chan *delivery, opts.ReceiverQueueSize),
		doneCh:    make(chan struct{}),
		name:      opts.Name,
		connected: make(chan struct{}),
		ackWait:   map[uint64]chan error{},
		batches:   map[entryKey]*batchAcks{},
		rt:        newRedeliveryTracker(),
	}
	if opts.nonDurable {
		co.reader = newReaderState(opts.Start)
	}
	stream, err := co.connectRetry(ctx, true)
	if err != nil {
		cancel()
		return nil, userError(err)
	}
	c.track(co)
	go co.run(stream)
	go co.redeliveryLoop()
	if p := opts.DeadLetter; p != nil && p.EnableRetry {
		if err := co.startRetry(ctx); err != nil {
			cctx, ccancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer ccancel()
			_ = co.Close(cctx)
			return nil, userError(err)
		}
	}
	return co, nil
}

// Topic returns the consumer's topic.
func (co *Consumer) Topic() string { return co.opts.Topic }

// Subscription returns the subscription name.
func (co *Consumer) Subscription() string { return co.opts.Subscription }

// Name returns the consumer name (given or assigned by the broker).
func (co *Consumer) Name() string {
	if co.part != nil {
		return co.part.name()
	}
	co.mu.Lock()
	defer co.mu.Unlock()
	return co.name
}

// IsActive reports, for a Failover subscription, whether the broker made
// this consumer the active one (false until told).
func (co *Consumer) IsActive() bool {
	if co.part != nil {
		return co.part.isActive()
	}
	return co.active.Load()
}

func (co *Consumer) connectRetry(ctx context.Context, first bool) (clientv1.Meridian_ConsumeClient, error) {
	bo := newBackoff(co.c.opts.InitialBackoff, co.c.opts.MaxBackoff)
	var last error
	for attempt := 0; ; attempt++ {
		actx, cancel := co.c.attemptCtx(ctx)
		stream, err := co.connect(actx)
		switched := actx.Err() != nil && ctx.Err() == nil
		cancel()
		if err == nil {
			return stream, nil
		}
		if switched {
			// A region switch cut the attempt short: go again at once.
			bo.reset()
			continue
		}
		if !retryable(err) && (first || !transientAfterOpen(err)) {
			return nil, err
		}
		last = err
		co.log.Debug("consumer connect failed; retrying", "attempt", attempt, "err", err)
		if werr := co.c.waitRetry(ctx, bo); werr != nil {
			return nil, fmt.Errorf("%w: subscribe %s on %s: %v (last error: %v)", ErrUnavailable, co.opts.Subscription, co.opts.Topic, werr, last)
		}
		if co.ctx.Err() != nil {
			return nil, ErrConsumerClosed
		}
	}
}

func subTypeToProto(t SubscriptionType) clientv1.SubscriptionType {
	switch t {
	case Shared:
		return clientv1.SubscriptionType_SUBSCRIPTION_TYPE_SHARED
	case Failover:
		return clientv1.SubscriptionType_SUBSCRIPTION_TYPE_FAILOVER
	case KeyShared:
		return clientv1.SubscriptionType_SUBSCRIPTION_TYPE_KEY_SHARED
	}
	return clientv1.SubscriptionType_SUBSCRIPTION_TYPE_EXCLUSIVE
}

// keySharedToProto converts KeySharedOptions (nil for other types).
func keySharedToProto(t SubscriptionType, o *KeySharedOptions) *clientv1.KeySharedPolicy {
	if t != KeyShared || o == nil {
		return nil
	}
	p := &clientv1.KeySharedPolicy{AllowOutOfOrder: o.AllowOutOfOrder}
	if len(o.Sticky) > 0 {
		p.Mode = clientv1.KeySharedMode_KEY_SHARED_MODE_STICKY
		for _, r := range o.Sticky {
			p.Ranges = append(p.Ranges, &clientv1.HashRange{Start: r.Start, End: r.End})
		}
	}
	return p
}

func positionToProto(p InitialPosition) clientv1.InitialPosition {
	if p == Earliest {
		return clientv1.InitialPosition_INITIAL_POSITION_EARLIEST
	}
	return clientv1.InitialPosition_INITIAL_POSITION_LATEST
}

// connect does one lookup + subscribe; on success the stream is returned
// with the subscribe answered (permits are granted by run).
func (co *Consumer) connect(ctx context.Context) (clientv1.Meridian_ConsumeClient, error) {
	addr, gen, err := co.c.lookup(ctx, co.opts.Topic)
	if err != nil {
		return nil, err
	}
	api, err := co.c.api(addr)
	if err != nil {
		return nil, err
	}
	sctx, cancel := context.WithCancel(co.ctx)
	stream, err := api.Consume(sctx)
	if err != nil {
		cancel()
		return nil, mapError(err)
	}
	co.mu.Lock()
	name := co.name
	start := co.startLocked() // reader.go
	co.mu.Unlock()
	if err := stream.Send(&clientv1.ConsumeRequest{Kind: &clientv1.ConsumeRequest_Subscribe{Subscribe: &clientv1.Subscribe{
		Topic:           co.opts.Topic,
		Subscription:    co.opts.Subscription,
		Type:            subTypeToProto(co.opts.Type),
		InitialPosition: positionToProto(co.opts.InitialPosition),
		ConsumerName:    name,
		Priority:        co.opts.Priority,
		NonDurable:      co.opts.nonDurable,
		Start:           start,
		Replicated:      co.opts.Replicated,
		KeyShared:       keySharedToProto(co.opts.Type, co.opts.KeyShared),
		Schema:          co.opts.schema,
	}}}); err != nil {
		cancel()
		return nil, mapError(err)
	}
	first, err := recvFirst(ctx, stream.Recv, co.c.opts.ConnectTimeout, "subscribe on "+co.opts.Topic, addr)
	if err != nil {
		cancel()
		return nil, err
	}
	if e := first.GetError(); e != nil {
		cancel()
		return nil, errorFromProto(e)
	}
	sub := first.GetSubscribed()
	if sub == nil {
		cancel()
		return nil, fmt.Errorf("client: subscribe: unexpected first response %T", first.GetKind())
	}
	co.mu.Lock()
	if co.name == "" {
		co.name = sub.GetConsumerName()
	}
	co.schemaVersion.Store(sub.GetSchemaVersion()) // schema.go
	if gen != co.gen {
		// Another region: partial batch acks refer to the old one's entries.
		co.batches = map[entryKey]*batchAcks{}
		co.gen = gen
	}
	co.mu.Unlock()
	co.c.connectedIn(gen)
	co.log.Debug("consumer connected", "broker", addr, "created", sub.GetCreated())
	return &cancelConsume{Meridian_ConsumeClient: stream, cancel: cancel}, nil
}

type cancelConsume struct {
	clientv1.Meridian_ConsumeClient
	cancel context.CancelFunc
}

// run serves streams until Close, reconnecting with a new lookup.
func (co *Consumer) run(stream clientv1.Meridian_ConsumeClient) {
	defer close(co.doneCh)
	for {
		err := co.serve(stream)
		stream.(*cancelConsume).cancel()
		if co.ctx.Err() != nil {
			return
		}
		restart := co.restarting.Swap(false) // a Seek ended the stream (reader.go)
		if restart {
			co.log.Debug("consumer stream restarted after a seek")
		} else {
			co.log.Info("consumer stream broken; reconnecting", "err", err)
		}
		var cerr error
		stream, cerr = co.connectRetry(co.ctx, false)
		if cerr != nil {
			if co.ctx.Err() != nil {
				return
			}
			co.log.Warn("consumer cannot reconnect", "err", cerr)
			co.mu.Lock()
			co.fatal = userError(cerr)
			co.mu.Unlock()
			return
		}
		if !restart {
			co.c.metrics.reconnects.WithLabelValues("consumer").Inc()
		}
	}
}

// serve runs one stream: it grants the full window, then reads entries
// into the queue until the stream fails.
func (co *Consumer) serve(stream clientv1.Meridian_ConsumeClient) error {
	// Drop what the previous stream buffered: the broker redelivers it.
	for {
		select {
		case <-co.queue:
			continue
		default:
		}
		break
	}
	co.mu.Lock()
	gen := co.gen
	co.mu.Unlock()
	// A region switch ends the stream; the run loop resubscribes in the
	// new region.
	endWatch := co.c.watchSwitch(gen, stream.(*cancelConsume).cancel)
	defer endWatch()
	// The broker redelivers every unacknowledged entry on the new stream:
	// their ack timeouts restart when they are received again.
	co.rt.clearReceived()
	co.mu.Lock()
	co.epoch++
	co.stream = stream
	co.lastEntry = MessageID{LedgerID: -1}
	co.flowDue = 0
	close(co.connected)
	co.mu.Unlock()

	err := co.sendReq(stream, &clientv1.ConsumeRequest{Kind: &clientv1.ConsumeRequest_Flow{Flow: &clientv1.Flow{Permits: uint32(co.opts.ReceiverQueueSize)}}})
	if err == nil {
		co.flushBatchAcks() // what a broken stream left pending
	}
	if err == nil {
		err = co.readLoop(stream)
	}

	co.mu.Lock()
	co.stream = nil
	co.connected = make(chan struct{})
	for id, ch := range co.ackWait {
		ch <- errStreamBroken
		delete(co.ackWait, id)
	}
	if co.unsubWait != nil {
		co.unsubWait <- fmt.Errorf("%w: stream broke before the broker answered", ErrUnavailable)
		co.unsubWait = nil
	}
	co.mu.Unlock()
	return err
}

var errStreamBroken = errors.New("client: consumer stream broken")

func (co *Consumer) sendReq(stream clientv1.Meridian_ConsumeClient, req *clientv1.ConsumeRequest) error {
	co.sendMu.Lock()
	defer co.sendMu.Unlock()
	if err := stream.Send(req); err != nil {
		return mapError(err)
	}
	return nil
}

func (co *Consumer) readLoop(stream clientv1.Meridian_ConsumeClient) error {
	co.mu.Lock()
	epoch := co.epoch
	co.mu.Unlock()
	for {
		resp, err := stream.Recv()
		if err != nil {
			return mapError(err)
		}
		switch k := resp.GetKind().(type) {
		case *clientv1.ConsumeResponse_Message:
			msgs, err := decodeEntryMessage(k.Message, co.opts.MaxEntryBytes)
			if err != nil {
				// A poison pill (poison.go): Receive dead-letters or
				// acknowledges it with its reason, never the application.
				d := &delivery{epoch: epoch, poison: newPoison(k.Message, err)}
				if co.reader != nil && k.Message.GetMetadata() != nil && co.readerSkip(stream, k.Message, d) {
					continue
				}
				select {
				case co.queue <- d:
				case <-co.ctx.Done():
					return co.ctx.Err()
				}
				continue
			}
			co.log.Debug("entry delivered", "id", idFromProto(k.Message.GetMessageId()), "messages", len(msgs), "redeliveries", k.Message.GetRedeliveryCount())
			d := &delivery{epoch: epoch, msgs: msgs}
			if co.reader != nil && co.readerSkip(stream, k.Message, d) { // reader.go
				continue
			}
			id := idFromProto(k.Message.GetMessageId())
			co.noteDelivered(id, len(msgs), k.Message.GetAckedBatchIndexes())
			if co.opts.NackBackoff != nil {
				co.rt.delivered(entryKey{id.LedgerID, id.EntryID}, k.Message.GetRedeliveryCount())
			}
			if d.msgs = co.skipAcked(id, msgs); len(d.msgs) == 0 {
				// Every message is acknowledged already (the whole-entry
				// ack was lost): acknowledge it and give the permit back.
				_ = co.sendReq(stream, &clientv1.ConsumeRequest{Kind: &clientv1.ConsumeRequest_Ack{Ack: &clientv1.Ack{MessageIds: []*clientv1.MessageId{{LedgerId: id.LedgerID, EntryId: id.EntryID}}}}})
				co.forgetEntry(id)
				_ = co.sendReq(stream, &clientv1.ConsumeRequest{Kind: &clientv1.ConsumeRequest_Flow{Flow: &clientv1.Flow{Permits: 1}}})
				continue
			}
			select {
			case co.queue <- d:
			case <-co.ctx.Done():
				return co.ctx.Err()
			}
		case *clientv1.ConsumeResponse_AckResponse:
			co.mu.Lock()
			if ch, ok := co.ackWait[k.AckResponse.GetRequestId()]; ok {
				delete(co.ackWait, k.AckResponse.GetRequestId())
				ch <- errorFromProto(k.AckResponse.GetError())
			}
			co.mu.Unlock()
		case *clientv1.ConsumeResponse_SeekResponse:
			// Seek (seek.go) waits on the same request table as acks.
			co.mu.Lock()
			if ch, ok := co.ackWait[k.SeekResponse.GetRequestId()]; ok {
				delete(co.ackWait, k.SeekResponse.GetRequestId())
				ch <- errorFromProto(k.SeekResponse.GetError())
			}
			co.mu.Unlock()
		case *clientv1.ConsumeResponse_ActiveChange:
			co.active.Store(k.ActiveChange.GetIsActive())
			co.log.Debug("active consumer change", "active", k.ActiveChange.GetIsActive())
		case *clientv1.ConsumeResponse_Error:
			err := errorFromProto(k.Error)
			co.mu.Lock()
			if co.unsubWait != nil {
				co.unsubWait <- err
				co.unsubWait = nil
			}
			co.mu.Unlock()
			co.log.Warn("broker reported a consumer error", "err", err)
		case *clientv1.ConsumeResponse_Unsubscribed:
			co.mu.Lock()
			if co.unsubWait != nil {
				co.unsubWait <- nil
				co.unsubWait = nil
			}
			co.mu.Unlock()
			// The subscription is gone: never resubscribe (which would
			// create it again) when the broker now ends the stream.
			co.cancel()
			return ErrConsumerClosed
		}
	}
}

// noteDelivered records a delivered entry of n messages for batch-level
// ack tracking; ackedIdx are the indexes the broker says are acknowledged.
func (co *Consumer) noteDelivered(id MessageID, n int, ackedIdx []int32) {
	co.mu.Lock()
	defer co.mu.Unlock()
	entry := MessageID{LedgerID: id.LedgerID, EntryID: id.EntryID}
	// prev serves cumulative acks inside this batch, so it must be an
	// entry BEFORE this one: a redelivered (older) entry gets none.
	prev, hasPrev := co.lastEntry, co.lastEntry.LedgerID >= 0 && co.lastEntry.Compare(entry) < 0
	if co.lastEntry.LedgerID < 0 || co.lastEntry.Compare(entry) < 0 {
		co.lastEntry = entry
	}
	if co.c.multiRegion() {
		if co.deliveredGen == nil {
			co.deliveredGen = map[entryKey]uint64{}
		}
		if len(co.deliveredGen) >= maxTrackedBatches {
			// Bounded: forget everything of older generations first.
			for k, g := range co.deliveredGen {
				if g != co.gen {
					delete(co.deliveredGen, k)
				}
			}
		}
		if len(co.deliveredGen) < maxTrackedBatches {
			co.deliveredGen[entryKey{id.LedgerID, id.EntryID}] = co.gen
		}
	}
	if n <= 1 {
		return
	}
	k := entryKey{id.LedgerID, id.EntryID}
	b, ok := co.batches[k]
	if !ok {
		if len(co.batches) == maxTrackedBatches {
			co.log.Warn("many partially acknowledged batches; acknowledge or close the consumer", "batches", len(co.batches))
		}
		b = &batchAcks{acked: make([]bool, n), left: n, prev: prev, hasPv: hasPrev}
		co.batches[k] = b
	}
	// A redelivery keeps what was acked already, plus what the broker
	// knows (acknowledged by index on an earlier stream or consumer).
	for _, i := range ackedIdx {
		if i >= 0 && int(i) < len(b.acked) && !b.acked[i] {
			b.acked[i] = true
			b.left--
		}
	}
}

// skipAcked drops the messages of a delivered entry that are already
// acknowledged by batch index.
func (co *Consumer) skipAcked(id MessageID, msgs []*ReceivedMessage) []*ReceivedMessage {
	co.mu.Lock()
	defer co.mu.Unlock()
	b, ok := co.batches[entryKey{id.LedgerID, id.EntryID}]
	if !ok || b.left == len(b.acked) {
		return msgs
	}
	out := make([]*ReceivedMessage, 0, b.left)
	for _, m := range msgs {
		if i := int(m.ID.BatchIndex); i < 0 || i >= len(b.acked) || !b.acked[i] {
			out = append(out, m)
		}
	}
	return out
}

// forgetEntry drops the client's tracking of an entry acknowledged as a
// whole.
func (co *Consumer) forgetEntry(id MessageID) {
	k := entryKey{id.LedgerID, id.EntryID}
	co.idxAcks.drop(k)
	co.mu.Lock()
	delete(co.batches, k)
	co.mu.Unlock()
	co.rt.forget(k)
	co.forgetDelivered(id, false)
}

// Receive returns the next message, waiting until one arrives, ctx ends
// (ctx.Err()) or the consumer closes (ErrConsumerClosed).
func (co *Consumer) Receive(ctx context.Context) (*ReceivedMessage, error) {
	if co.part != nil {
		return co.part.receive(ctx)
	}
	co.recvMu.Lock()
	defer co.recvMu.Unlock()
	for {
		co.mu.Lock()
		epoch, fatal := co.epoch, co.fatal
		co.mu.Unlock()
		if d := co.cur; d != nil {
			if d.poison != nil {
				if d.epoch == epoch {
					co.handlePoison(ctx, d) // poison.go
					co.entryDoneLocked(epoch)
				}
				co.cur = nil
				continue
			}
			if d.epoch == epoch && d.next == 0 && co.deadLetterDue(d) {
				// dlq.go: not for the application; written to the
				// dead-letter topic and acknowledged here.
				_ = co.deadLetter(ctx, d)
				co.cur = nil
				co.entryDoneLocked(epoch)
				continue
			}
			if d.epoch == epoch && d.next < len(d.msgs) {
				m := d.msgs[d.next]
				co.noteReceived(m.ID) // acktimeout.go
				d.next++
				if d.next == len(d.msgs) {
					co.cur = nil
					if co.reader != nil {
						co.readerEntryDone(d) // reader.go
					}
					co.entryDoneLocked(epoch)
				}
				co.c.metrics.received.Inc()
				return m, nil
			}
			co.cur = nil
		}
		if fatal != nil {
			return nil, fatal
		}
		select {
		case m := <-co.retryCh(): // retry.go (its consumer tracks its ack timeout)
			return m, nil
		case d := <-co.queue:
			// Compare with the epoch now: a reconnect may have happened
			// while this call waited.
			co.mu.Lock()
			current := co.epoch
			co.mu.Unlock()
			if d.epoch == current {
				co.cur = d
			}
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-co.ctx.Done():
			return nil, ErrConsumerClosed
		case <-co.doneCh:
			// The run loop gave up; report why on the next turn.
			co.mu.Lock()
			f := co.fatal
			co.mu.Unlock()
			if f == nil {
				f = ErrConsumerClosed
			}
			return nil, f
		}
	}
}

// entryDoneLocked counts a fully received entry and grants permits back
// once half the window is free (fewer, larger Flow messages). recvMu held.
func (co *Consumer) entryDoneLocked(epoch uint64) {
	threshold := uint32(max(1, co.opts.ReceiverQueueSize/2))
	co.mu.Lock()
	if co.epoch != epoch || co.stream == nil {
		co.mu.Unlock()
		return
	}
	co.flowDue++
	if co.flowDue < threshold {
		co.mu.Unlock()
		return
	}
	n, stream := co.flowDue, co.stream
	co.flowDue = 0
	co.mu.Unlock()
	if err := co.sendReq(stream, &clientv1.ConsumeRequest{Kind: &clientv1.ConsumeRequest_Flow{Flow: &clientv1.Flow{Permits: n}}}); err != nil {
		co.log.Debug("flow not sent; the reconnect grants a full window", "err", err)
	}
}

// Ack acknowledges one message. A message of a batch is recorded locally;
// the entry is acknowledged on the broker once every message of its batch
// is. Ack waits for the broker to apply the acknowledgement, resending it
// after a reconnect, until ctx ends.
func (co *Consumer) Ack(ctx context.Context, id MessageID) error {
	if co.part != nil {
		return co.part.ack(ctx, id)
	}
	if err := co.checkOpen(); err != nil {
		return err
	}
	if t := co.target(id); t != co {
		return t.Ack(ctx, id) // a retried message (retry.go)
	}
	gen, stale := co.ackGen(id)
	if stale {
		return nil // delivered by a region the client has left: redelivered here
	}
	if !co.individualTarget(id) {
		co.ackBatchIndex(id, gen)
		return nil
	}
	co.forgetEntry(id)
	// Pending batch-index acks ride along (nack.go).
	return co.sendAck(ctx, gen, &clientv1.Ack{MessageIds: []*clientv1.MessageId{{LedgerId: id.LedgerID, EntryId: id.EntryID}},
		BatchIndexAcks: co.idxAcks.take(gen)})
}

// AckCumulative acknowledges every message up to and including id. It is
// refused (ErrNotAllowed) on Shared subscriptions. When id is inside a
// batch that is not fully covered, the entry before it is acknowledged
// cumulatively and the batch's first messages are recorded locally.
func (co *Consumer) AckCumulative(ctx context.Context, id MessageID) error {
	if co.part != nil {
		return co.part.ackCumulative(ctx, id)
	}
	if err := co.checkOpen(); err != nil {
		return err
	}
	if co.opts.Type == Shared {
		return fmt.Errorf("%w: cumulative ack on Shared subscription %q", ErrNotAllowed, co.opts.Subscription)
	}
	if t := co.target(id); t != co {
		return t.AckCumulative(ctx, id) // a retried message (retry.go)
	}
	gen, stale := co.ackGen(id)
	if stale {
		return nil // delivered by a region the client has left: redelivered here
	}
	target, send := co.cumulativeTarget(id)
	if !send {
		return nil
	}
	co.forgetDelivered(target, true)
	co.rt.forgetUpTo(target)
	return co.sendAck(ctx, gen, &clientv1.Ack{MessageIds: []*clientv1.MessageId{target.toProto()}, Cumulative: true})
}

// cumulativeTarget records a cumulative ack of id locally and returns the
// entry to acknowledge cumulatively on the broker (send false: nothing to
// send yet). Inside a batch not fully covered, the target is the entry
// delivered before it, so that no unacknowledged message is covered.
func (co *Consumer) cumulativeTarget(id MessageID) (target MessageID, send bool) {
	co.mu.Lock()
	defer co.mu.Unlock()
	target = MessageID{LedgerID: id.LedgerID, EntryID: id.EntryID}
	k := entryKey{id.LedgerID, id.EntryID}
	if b, ok := co.batches[k]; ok && int(id.BatchIndex) < len(b.acked)-1 {
		for i := 0; i <= int(id.BatchIndex) && i < len(b.acked); i++ {
			if !b.acked[i] {
				b.acked[i] = true
				b.left--
			}
		}
		if b.left > 0 {
			if !b.hasPv {
				return MessageID{}, false
			}
			target = b.prev
		}
	}
	for bk := range co.batches {
		if (MessageID{LedgerID: bk.ledger, EntryID: bk.entry}).Compare(target) <= 0 {
			delete(co.batches, bk)
		}
	}
	return target, true
}

// individualTarget records an individual ack of id and reports whether
// its entry is now fully acknowledged (and must be acked on the broker).
func (co *Consumer) individualTarget(id MessageID) bool {
	co.mu.Lock()
	defer co.mu.Unlock()
	k := entryKey{id.LedgerID, id.EntryID}
	b, ok := co.batches[k]
	if !ok {
		return true
	}
	if int(id.BatchIndex) >= 0 && int(id.BatchIndex) < len(b.acked) && !b.acked[id.BatchIndex] {
		b.acked[id.BatchIndex] = true
		b.left--
	}
	if b.left > 0 {
		return false
	}
	delete(co.batches, k)
	return true
}

// ackGen returns the switch generation id's entry was delivered in and
// whether the client has left that region since (then the ack must not be
// sent: the position means nothing in the new region).
func (co *Consumer) ackGen(id MessageID) (gen uint64, stale bool) {
	co.mu.Lock()
	gen, ok := co.deliveredGen[entryKey{id.LedgerID, id.EntryID}]
	if !ok {
		gen = co.gen
	}
	co.mu.Unlock()
	return gen, co.c.isStale(gen)
}

// forgetDelivered drops the delivery generation of id's entry (and with
// upTo of every entry before it: a cumulative ack, pruned only once many
// are tracked, as that walks the map).
func (co *Consumer) forgetDelivered(id MessageID, upTo bool) {
	co.mu.Lock()
	defer co.mu.Unlock()
	if len(co.deliveredGen) == 0 {
		return
	}
	k := entryKey{id.LedgerID, id.EntryID}
	if !upTo {
		delete(co.deliveredGen, k)
		return
	}
	if len(co.deliveredGen) < 4*co.opts.ReceiverQueueSize {
		return
	}
	for dk, g := range co.deliveredGen {
		if g == co.gen && (MessageID{LedgerID: dk.ledger, EntryID: dk.entry}).Compare(id) <= 0 {
			delete(co.deliveredGen, dk)
		}
	}
}

// sendAck sends ack with a request ID and waits for the broker's answer,
// resending on the next stream when the current one breaks first. An ack
// of switch generation gen is dropped once the client left that region.
func (co *Consumer) sendAck(ctx context.Context, gen uint64, ack *clientv1.Ack) error {
	for {
		stream, err := co.waitStream(ctx)
		if err != nil {
			return err
		}
		co.mu.Lock()
		streamGen := co.gen
		co.mu.Unlock()
		if co.c.isStale(gen) || streamGen != gen {
			if co.c.isStale(gen) {
				return nil
			}
			// The stream is an older region's, about to end: wait for the next.
			if werr := sleepCtx(ctx, 10*time.Millisecond); werr != nil {
				return werr
			}
			continue
		}
		req := co.nextReq.Add(1)
		ch := make(chan error, 1)
		co.mu.Lock()
		if co.stream != stream {
			co.mu.Unlock()
			continue
		}
		co.ackWait[req] = ch
		co.mu.Unlock()
		ack.RequestId = req
		if err := co.sendReq(stream, &clientv1.ConsumeRequest{Kind: &clientv1.ConsumeRequest_Ack{Ack: ack}}); err != nil {
			co.mu.Lock()
			delete(co.ackWait, req)
			co.mu.Unlock()
			// The stream is broken; serve notices and reconnects.
			if werr := sleepCtx(ctx, 10*time.Millisecond); werr != nil {
				return werr
			}
			continue
		}
		select {
		case err := <-ch:
			if errors.Is(err, errStreamBroken) {
				continue
			}
			return userError(err)
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

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// waitStream returns the current stream, waiting for a reconnect.
func (co *Consumer) waitStream(ctx context.Context) (clientv1.Meridian_ConsumeClient, error) {
	for {
		co.mu.Lock()
		s, conn, fatal := co.stream, co.connected, co.fatal
		co.mu.Unlock()
		if s != nil {
			return s, nil
		}
		if fatal != nil {
			return nil, fatal
		}
		select {
		case <-conn:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-co.ctx.Done():
			return nil, ErrConsumerClosed
		case <-co.doneCh:
			co.mu.Lock()
			f := co.fatal
			co.mu.Unlock()
			if f == nil {
				f = ErrConsumerClosed
			}
			return nil, f
		}
	}
}

func (co *Consumer) checkOpen() error {
	if co.ctx.Err() != nil {
		return ErrConsumerClosed
	}
	return nil
}

// Unsubscribe deletes the subscription (refused while other consumers are
// connected) and closes the consumer.
func (co *Consumer) Unsubscribe(ctx context.Context) error {
	if co.part != nil {
		return co.part.unsubscribe(ctx, co)
	}
	stream, err := co.waitStream(ctx)
	if err != nil {
		return err
	}
	ch := make(chan error, 1)
	co.mu.Lock()
	co.unsubWait = ch
	co.mu.Unlock()
	if err := co.sendReq(stream, &clientv1.ConsumeRequest{Kind: &clientv1.ConsumeRequest_Unsubscribe{Unsubscribe: &clientv1.Unsubscribe{}}}); err != nil {
		return err
	}
	select {
	case err := <-ch:
		if err != nil {
			return userError(err)
		}
	case <-ctx.Done():
		return ctx.Err()
	}
	return co.Close(ctx)
}

// Close closes the stream; the broker redelivers unacknowledged messages
// to the subscription's other (or next) consumers. Idempotent.
func (co *Consumer) Close(ctx context.Context) error {
	if co.part != nil {
		return co.part.close(ctx, co)
	}
	co.closeOnce.Do(func() {
		co.confirmBatchAcks(ctx)
		co.mu.Lock()
		s := co.stream
		co.mu.Unlock()
		if s != nil {
			co.sendMu.Lock()
			_ = s.CloseSend()
			co.sendMu.Unlock()
		}
		co.cancel()
		select {
		case <-co.doneCh:
		case <-ctx.Done():
			co.closeErr = ctx.Err()
		}
		co.letters.close(ctx)
		if co.retry != nil {
			_ = co.retry.co.Close(ctx)
		}
		co.c.untrack(co)
	})
	return co.closeErr
}
