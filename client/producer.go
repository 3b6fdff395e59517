package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
)

// Producer publishes messages to one topic. It batches messages, sends each
// batch as one entry with the sequence ID of its first message, and resolves
// every message with the ID the broker stored it at. Safe for concurrent use.
//
// Delivery: at least once. When the connection breaks, the producer looks the
// topic up again, reconnects with backoff and resends every unresolved batch
// with its original sequence IDs; the broker drops a resent batch it already
// stored (receipt marked duplicate) and the producer counts it (Stats).
type Producer struct {
	c    *Client
	opts ProducerOptions
	log  *slog.Logger

	limiter *pendingLimiter
	disp    *dispatcher   // runs callbacks in resolution order
	closeCh chan struct{} // closed when Close starts: no more sends
	doneCh  chan struct{} // closed when the run loop has exited
	ctx     context.Context
	cancel  context.CancelFunc

	closeOnce sync.Once
	closeErr  error

	duplicates atomic.Int64
	resent     atomic.Int64
	reconnects atomic.Int64
	// schemaVersion is ProducerOpened.schema_version (schema.go).
	schemaVersion atomic.Int32

	// mu guards the fields below.
	mu       sync.Mutex
	name     string
	nextSeq  int64
	builder  *batchBuilder
	timerGen uint64   // generation of the open batch's delay timer
	inflight []*batch // closed batches awaiting a receipt, in send order
	toSend   int      // inflight[toSend:] are not yet sent on the current stream
	wake     chan struct{}
	stalled  int           // send timeouts in a row with no receipt between
	stallCh  chan struct{} // signalled when stalled reaches StallTimeouts
	maxBytes int64         // broker's max entry payload
	region   string        // the owner's region (ProducerOpened.region)
	used     []string      // regions the producer opened in (failover_from)
	identity string        // failover identity (failover_identity.go), fixed
	gen      uint64        // the client's switch generation of the stream
	// lastErr is the last retryable error a receipt reported (a quota, an
	// unavailable topic); a send timeout names it.
	lastErr error
	// quotaWait is the pause before reconnecting after a quota refusal
	// (doubling up to maxQuotaWait; reset by a stored batch).
	quotaWait time.Duration
	waiters   []flushWaiter
	closing   bool
	fatal     error // set when the producer can no longer send

	// part, for a partitioned topic, holds the partitions' producers and
	// every public method delegates to it (partitioned_producer.go).
	part *partitionedProducer
}

type flushWaiter struct {
	seq int64 // resolved when every message with seq <= this is resolved
	ch  chan struct{}
}

// ProducerStats are counters of a producer's life.
type ProducerStats struct {
	// Duplicates counts batches the broker reported as already stored
	// (resends after a reconnect).
	Duplicates int64
	// Resent counts batches sent again after a reconnect.
	Resent int64
	// Reconnects counts successful reconnections.
	Reconnects int64
	// Pending is the number of unresolved messages.
	Pending int
}

// NewProducer looks the topic up and opens a producer on its owner. It fails
// at once on bad options or a permanent broker error (invalid name, missing
// namespace) and retries transient ones until ctx ends.
func (c *Client) NewProducer(ctx context.Context, opts ProducerOptions) (*Producer, error) {
	if p, ok, err := c.newPartitionedProducer(ctx, opts); ok {
		return p, err
	}
	return c.newProducer(ctx, opts)
}

// newProducer opens a producer on one (non-partitioned) topic.
func (c *Client) newProducer(ctx context.Context, opts ProducerOptions) (*Producer, error) {
	opts = opts.withDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if err := c.checkOpen(); err != nil {
		return nil, err
	}
	pctx, cancel := context.WithCancel(context.Background())
	p := &Producer{
		c:        c,
		opts:     opts,
		log:      c.log.With("topic", opts.Topic, "producer", opts.Name),
		limiter:  newPendingLimiter(opts.MaxPendingMessages, opts.BlockIfQueueFull),
		disp:     newDispatcher(),
		closeCh:  make(chan struct{}),
		doneCh:   make(chan struct{}),
		ctx:      pctx,
		cancel:   cancel,
		name:     opts.Name,
		identity: c.newFailoverIdentity(),
		builder:  newBatchBuilder(opts.BatchingMaxMessages, opts.BatchingMaxBytes),
		wake:     make(chan struct{}, 1),
		stallCh:  make(chan struct{}, 1),
	}
	stream, err := p.connectRetry(ctx, true)
	if err != nil {
		cancel()
		return nil, err
	}
	p.log = c.log.With("topic", opts.Topic, "producer", p.name)
	c.track(p)
	go p.disp.run()
	go p.run(stream)
	go p.timeoutLoop()
	return p, nil
}

// Topic returns the producer's topic.
func (p *Producer) Topic() string { return p.opts.Topic }

// Name returns the producer name (given or assigned by the broker).
func (p *Producer) Name() string {
	if p.part != nil {
		return p.part.name()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.name
}

// Region returns the region of the broker the producer writes to: the
// origin region of its messages ("" before the broker reported it).
func (p *Producer) Region() string {
	if p.part != nil {
		return p.part.region()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.region
}

// Backoff after a quota refusal: the quota clears when consumers or
// replicators drain the backlog, which takes a while; resending at once
// would only load the broker.
const (
	minQuotaWait = 50 * time.Millisecond
	maxQuotaWait = time.Second
)

// Stats returns the producer's counters.
func (p *Producer) Stats() ProducerStats {
	if p.part != nil {
		return p.part.stats()
	}
	return ProducerStats{
		Duplicates: p.duplicates.Load(),
		Resent:     p.resent.Load(),
		Reconnects: p.reconnects.Load(),
		Pending:    p.limiter.inUse(),
	}
}

// Send publishes m and waits for its receipt (or ctx, or the send timeout).
// If ctx ends first the message may still be sent; its outcome is unknown.
func (p *Producer) Send(ctx context.Context, m *Message) (MessageID, error) {
	if p.part != nil {
		return p.part.send(ctx, m)
	}
	type result struct {
		id  MessageID
		err error
	}
	ch := make(chan result, 1)
	p.SendAsync(ctx, m, func(id MessageID, _ *Message, err error) { ch <- result{id, err} })
	// A synchronous send must not wait for the batch delay.
	p.mu.Lock()
	p.closeBatchLocked()
	p.mu.Unlock()
	select {
	case r := <-ch:
		return r.id, r.err
	case <-ctx.Done():
		return MessageID{}, ctx.Err()
	}
}

// SendAsync accepts m for sending and calls cb exactly once with its ID or
// error. It waits only for room in the pending queue (BlockIfQueueFull;
// bounded by ctx), otherwise cb gets ErrProducerQueueFull at once. Callbacks
// of accepted messages run one at a time, in resolution order, on one
// internal goroutine: cb must not block (and must not call Send, which waits
// for a callback). Errors found before acceptance are passed to cb on the
// caller's goroutine.
func (p *Producer) SendAsync(ctx context.Context, m *Message, cb func(MessageID, *Message, error)) {
	if p.part != nil {
		p.part.sendAsync(ctx, m, cb)
		return
	}
	if cb == nil {
		cb = func(MessageID, *Message, error) {}
	}
	if m == nil {
		cb(MessageID{}, m, fmt.Errorf("%w: nil message", ErrInvalidArgument))
		return
	}
	if err := m.validateReplication(); err != nil {
		cb(MessageID{}, m, err)
		return
	}
	if err := m.validateDispatch(); err != nil {
		cb(MessageID{}, m, err)
		return
	}
	if sz := m.size(); p.opts.MaxMessageSize > 0 && sz > p.opts.MaxMessageSize {
		cb(MessageID{}, m, fmt.Errorf("%w: message is %d bytes, limit %d (MaxMessageSize)", ErrMessageTooLarge, sz, p.opts.MaxMessageSize))
		return
	}
	select {
	case <-p.closeCh:
		cb(MessageID{}, m, ErrProducerClosed)
		return
	default:
	}
	if err := p.limiter.acquire(ctx, p.closeCh); err != nil {
		cb(MessageID{}, m, err)
		return
	}
	p.mu.Lock()
	if p.closing || p.fatal != nil {
		err := p.fatal
		if p.closing {
			err = ErrProducerClosed
		}
		p.mu.Unlock()
		p.limiter.release(1)
		cb(MessageID{}, m, err)
		return
	}
	now := time.Now()
	pm := pendingMsg{msg: m, seq: p.nextSeq, callback: cb, accepted: now, deliverAt: m.deliverAtMs(now)}
	m.SequenceID = pm.seq
	m.Duplicate = false
	p.nextSeq++
	wasEmpty := p.builder.empty()
	closed, full := p.builder.add(pm)
	if closed != nil {
		p.enqueueLocked(closed)
		wasEmpty = true
	}
	if full || (!p.opts.BatchingHoldOpen && len(p.inflight) == 0) {
		// Full, or nothing in flight: waiting would only add latency.
		p.closeBatchLocked()
	} else if wasEmpty {
		p.timerGen++
		gen := p.timerGen
		time.AfterFunc(p.opts.BatchingMaxDelay, func() {
			p.mu.Lock()
			if p.timerGen == gen {
				p.closeBatchLocked()
			}
			p.mu.Unlock()
		})
	}
	p.mu.Unlock()
}

// closeBatchLocked closes the open batch, if any, and queues it for sending.
func (p *Producer) closeBatchLocked() {
	if b := p.builder.take(); b != nil {
		p.timerGen++
		p.enqueueLocked(b)
	}
}

// enqueueLocked encodes b and appends it to the in-flight queue.
func (p *Producer) enqueueLocked(b *batch) {
	payload, usize, err := encodeBatch(b, p.opts.Compression)
	if err == nil && p.maxBytes > 0 && int64(len(payload)) > p.maxBytes {
		err = fmt.Errorf("%w: batch is %d bytes, broker limit %d", ErrMessageTooLarge, len(payload), p.maxBytes)
	}
	if err != nil {
		// Resolve outside the lock would be nicer, but callbacks must not
		// block anyway; keep ordering simple.
		p.resolveLocked(b, MessageID{}, err)
		return
	}
	b.payload = payload
	b.usize = usize
	p.inflight = append(p.inflight, b)
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// resolveLocked hands b's callbacks to the dispatcher (which then frees
// the batch's pending slots) and wakes flushers. With err == nil, message i
// gets first + batch index i.
func (p *Producer) resolveLocked(b *batch, first MessageID, err error) {
	msgs := b.msgs
	dup := b.duplicate && err == nil
	p.disp.push(func() {
		for i, pm := range msgs {
			pm.msg.Duplicate = dup
			id := MessageID{}
			if err == nil {
				id = first
				if first != UnknownMessageID {
					id.BatchIndex += int32(i)
				}
			}
			p.c.metrics.observeSend(pm.accepted, len(pm.msg.Payload), err)
			pm.callback(id, pm.msg, err)
		}
		p.limiter.release(len(msgs))
	})
	p.notifyFlushLocked()
}

// minUnresolvedLocked is the lowest sequence ID not yet resolved.
func (p *Producer) minUnresolvedLocked() int64 {
	if len(p.inflight) > 0 {
		return p.inflight[0].firstSeq()
	}
	if b := p.builder.cur; b != nil {
		return b.firstSeq()
	}
	return p.nextSeq
}

func (p *Producer) notifyFlushLocked() {
	if len(p.waiters) == 0 {
		return
	}
	min := p.minUnresolvedLocked()
	kept := p.waiters[:0]
	for _, w := range p.waiters {
		if w.seq < min {
			// Closed by the dispatcher after the callbacks queued before it.
			ch := w.ch
			p.disp.push(func() { close(ch) })
		} else {
			kept = append(kept, w)
		}
	}
	p.waiters = kept
}

// Flush sends the open batch and waits until every message accepted before
// the call is resolved (acknowledged or failed) and its callback has run,
// or ctx ends. Like Send, it must not be called from a send callback.
func (p *Producer) Flush(ctx context.Context) error {
	if p.part != nil {
		return p.part.flush(ctx)
	}
	p.mu.Lock()
	p.closeBatchLocked()
	w := flushWaiter{seq: p.nextSeq - 1, ch: make(chan struct{})}
	if p.minUnresolvedLocked() > w.seq {
		// Every message is resolved, but the callbacks of the last ones
		// may still wait in the dispatcher's queue (a burst of receipts
		// after a failover queues thousands): returning now would let the
		// caller see fewer callbacks than messages flushed. Close w after
		// them, as notifyFlushLocked does.
		ch := w.ch
		p.disp.push(func() { close(ch) })
	} else {
		p.waiters = append(p.waiters, w)
	}
	p.mu.Unlock()
	select {
	case <-w.ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close stops accepting messages, flushes what is pending (bounded by ctx)
// and closes the stream. Messages still unresolved when ctx ends fail with
// ErrProducerClosed. Close is idempotent; every call returns the first
// call's result.
func (p *Producer) Close(ctx context.Context) error {
	if p.part != nil {
		return p.part.close(ctx, p)
	}
	p.closeOnce.Do(func() { p.closeErr = p.doClose(ctx) })
	return p.closeErr
}

func (p *Producer) doClose(ctx context.Context) error {
	ferr := p.Flush(ctx)
	p.mu.Lock()
	p.closing = true
	close(p.closeCh)
	p.mu.Unlock()
	p.cancel()
	<-p.doneCh
	p.failAll(ErrProducerClosed)
	p.disp.close()
	p.c.untrack(p)
	if ferr != nil {
		return fmt.Errorf("client: close producer: flush: %w", ferr)
	}
	return nil
}

// failAll resolves every unresolved message with err.
func (p *Producer) failAll(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closeBatchLocked()
	bs := p.inflight
	p.inflight, p.toSend = nil, 0
	for _, b := range bs {
		p.resolveLocked(b, MessageID{}, err)
	}
	for _, w := range p.waiters {
		ch := w.ch
		p.disp.push(func() { close(ch) })
	}
	p.waiters = nil
}

// timeoutLoop fails batches older than SendTimeout. Batches are in accept
// order, so only the head of the queue needs checking. StallTimeouts
// timeouts in a row without a receipt make the current stream give up
// (see serve): its broker may hang with the connection still open.
func (p *Producer) timeoutLoop() {
	if p.opts.SendTimeout < 0 {
		return
	}
	tick := min(max(p.opts.SendTimeout/10, 5*time.Millisecond), time.Second)
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		select {
		case <-p.ctx.Done():
			return
		case now := <-t.C:
			p.mu.Lock()
			for len(p.inflight) > 0 && now.Sub(p.inflight[0].oldest()) > p.opts.SendTimeout {
				b := p.inflight[0]
				p.popHeadLocked()
				p.resolveLocked(b, MessageID{}, p.timeoutErrLocked())
				p.noteTimeoutLocked()
			}
			if len(p.inflight) == 0 && p.builder.cur != nil && now.Sub(p.builder.cur.oldest()) > p.opts.SendTimeout {
				b := p.builder.take()
				p.timerGen++
				p.resolveLocked(b, MessageID{}, p.timeoutErrLocked())
			}
			p.mu.Unlock()
		}
	}
}

// timeoutErrLocked is the error of a send that timed out: ErrSendTimeout,
// also wrapping the last retryable broker error (ErrQuotaExceeded while a
// quota held the sends back) so that the caller sees why.
func (p *Producer) timeoutErrLocked() error {
	if p.lastErr != nil {
		return fmt.Errorf("%w: not acknowledged within %v; last broker error: %w", ErrSendTimeout, p.opts.SendTimeout, p.lastErr)
	}
	return fmt.Errorf("%w: not acknowledged within %v", ErrSendTimeout, p.opts.SendTimeout)
}

// noteTimeoutLocked counts a send timeout of a sent batch and asks serve
// to drop the stream once StallTimeouts have happened in a row.
func (p *Producer) noteTimeoutLocked() {
	p.stalled++
	if p.opts.StallTimeouts <= 0 || p.stalled < p.opts.StallTimeouts {
		return
	}
	p.stalled = 0
	select {
	case p.stallCh <- struct{}{}:
	default:
	}
}

func (p *Producer) popHeadLocked() {
	p.inflight[0] = nil
	p.inflight = p.inflight[1:]
	if p.toSend > 0 {
		p.toSend--
	}
}

// connectRetry looks the topic up and opens the produce stream, retrying
// transient failures with backoff until ctx (or the producer) ends.
// first reports the initial connection: then a permanent error is returned
// at once, and the sequence IDs start above the broker's last stored one.
func (p *Producer) connectRetry(ctx context.Context, first bool) (clientv1.Meridian_ProduceClient, error) {
	bo := newBackoff(p.c.opts.InitialBackoff, p.c.opts.MaxBackoff)
	var last error
	for attempt := 0; ; attempt++ {
		actx, cancel := p.c.attemptCtx(ctx)
		stream, err := p.connect(actx, first)
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
		p.log.Debug("producer connect failed; retrying", "attempt", attempt, "err", err)
		if werr := p.c.waitRetry(ctx, bo); werr != nil {
			return nil, fmt.Errorf("%w: open producer on %s: %v (last error: %v)", ErrUnavailable, p.opts.Topic, werr, last)
		}
		if p.ctx.Err() != nil {
			return nil, ErrProducerClosed
		}
	}
}

// connect does one lookup + open.
func (p *Producer) connect(ctx context.Context, first bool) (clientv1.Meridian_ProduceClient, error) {
	addr, gen, err := p.c.lookup(ctx, p.opts.Topic)
	if err != nil {
		return nil, err
	}
	api, err := p.c.api(addr)
	if err != nil {
		return nil, err
	}
	sctx, cancel := context.WithCancel(p.ctx)
	stream, err := api.Produce(sctx)
	if err != nil {
		cancel()
		return nil, mapError(err)
	}
	p.mu.Lock()
	name := p.name
	from := p.c.failoverFrom(p.used)
	identity := p.identity
	p.mu.Unlock()
	if err := stream.Send(&clientv1.ProduceRequest{Kind: &clientv1.ProduceRequest_Open{Open: &clientv1.OpenProducer{
		Topic: p.opts.Topic, ProducerName: name, FailoverFrom: from, FailoverIdentity: identity,
		Schema: p.opts.schema,
	}}}); err != nil {
		cancel()
		return nil, mapError(err)
	}
	resp, err := recvFirst(ctx, stream.Recv, p.c.opts.ConnectTimeout, "open producer on "+p.opts.Topic, addr)
	if err != nil {
		cancel()
		p.c.noteFailure(p.opts.Topic, err)
		return nil, err
	}
	opened := resp.GetOpened()
	if opened == nil {
		cancel()
		return nil, fmt.Errorf("client: open producer: unexpected first response %T", resp.GetKind())
	}
	p.mu.Lock()
	if p.name == "" {
		p.name = opened.GetProducerName()
	}
	if first {
		p.nextSeq = opened.GetLastSequenceId() + 1
		if p.nextSeq < 0 {
			p.nextSeq = 0
		}
	}
	p.maxBytes = opened.GetMaxMessageBytes()
	p.schemaVersion.Store(opened.GetSchemaVersion()) // schema.go
	p.region = opened.GetRegion()
	if r := p.region; r != "" && !slices.Contains(p.used, r) && len(p.used) < MaxRegions {
		p.used = append(p.used, r)
	}
	p.gen = gen
	p.mu.Unlock()
	p.c.connectedIn(gen)
	p.log.Debug("producer connected", "broker", addr, "last_sequence_id", opened.GetLastSequenceId())
	return &cancelOnEnd{Meridian_ProduceClient: stream, cancel: cancel}, nil
}

// cancelOnEnd ties a stream to the cancel func of its context.
type cancelOnEnd struct {
	clientv1.Meridian_ProduceClient
	cancel context.CancelFunc
}

// run serves one stream at a time and reconnects when it breaks, until the
// producer closes.
func (p *Producer) run(stream clientv1.Meridian_ProduceClient) {
	defer close(p.doneCh)
	for {
		err := p.serve(stream)
		if c, ok := stream.(*cancelOnEnd); ok {
			c.cancel()
		}
		if p.ctx.Err() != nil {
			return
		}
		p.log.Info("producer stream broken; reconnecting", "err", err)
		if errors.Is(err, ErrQuotaExceeded) {
			// Resend after a pause (every unresolved batch, in order, on the
			// new stream); the send timeout still bounds each message.
			p.mu.Lock()
			p.quotaWait = min(max(2*p.quotaWait, minQuotaWait), maxQuotaWait)
			wait := p.quotaWait
			p.mu.Unlock()
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-p.ctx.Done():
				t.Stop()
				return
			}
		}
		var cerr error
		stream, cerr = p.connectRetry(p.ctx, false)
		if cerr != nil {
			if p.ctx.Err() != nil {
				return
			}
			// Permanent failure (topic deleted, ...): fail everything.
			p.log.Warn("producer cannot reconnect", "err", cerr)
			p.mu.Lock()
			p.fatal = cerr
			p.mu.Unlock()
			p.failAll(cerr)
			return
		}
		p.reconnects.Add(1)
		p.c.metrics.reconnects.WithLabelValues("producer").Inc()
	}
}

// serve pumps batches out and receipts in on one stream until it fails.
func (p *Producer) serve(stream clientv1.Meridian_ProduceClient) error {
	p.mu.Lock()
	if n := len(p.inflight); n > 0 && p.toSend > 0 {
		p.resent.Add(int64(p.toSend))
	}
	p.toSend = 0 // resend everything unresolved on the new stream
	p.stalled = 0
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
	select { // a stall of the previous stream
	case <-p.stallCh:
	default:
	}

	p.mu.Lock()
	gen := p.gen
	p.mu.Unlock()
	_, sw := p.c.switchSignal()
	if p.c.isStale(gen) {
		return errRegionSwitch // connected just before a switch
	}
	errc := make(chan error, 2)
	stop := make(chan struct{})
	go func() { errc <- p.writeLoop(stream, stop) }()
	go func() { errc <- p.readLoop(stream) }()
	var err error
	running := 2
	select {
	case err = <-errc:
		running--
	case <-p.stallCh:
		err = fmt.Errorf("%w: %d sends in a row not acknowledged within %v; dropping the stream to look the topic up again",
			ErrSendTimeout, p.opts.StallTimeouts, p.opts.SendTimeout)
		p.c.metrics.stalls.Inc()
	case <-sw:
		err = errRegionSwitch
	}
	close(stop)
	if c, ok := stream.(*cancelOnEnd); ok {
		c.cancel()
	}
	for ; running > 0; running-- {
		<-errc
	}
	return err
}

func (p *Producer) writeLoop(stream clientv1.Meridian_ProduceClient, stop <-chan struct{}) error {
	for {
		p.mu.Lock()
		var b *batch
		if p.toSend < len(p.inflight) {
			b = p.inflight[p.toSend]
			p.toSend++
		}
		p.mu.Unlock()
		if b == nil {
			select {
			case <-p.wake:
				continue
			case <-stop:
				return nil
			case <-p.ctx.Done():
				return p.ctx.Err()
			}
		}
		to, disable := b.replication()
		req := &clientv1.ProduceRequest{Kind: &clientv1.ProduceRequest_Send{Send: &clientv1.Send{
			SequenceId:         b.firstSeq(),
			NumMessages:        int32(len(b.msgs)),
			Compression:        compressionToProto(p.opts.Compression),
			UncompressedSize:   b.usize,
			PublishTimeMs:      time.Now().UnixMilli(),
			Payload:            b.payload,
			ReplicateTo:        to,
			DisableReplication: disable,
			DeliverAtMs:        b.deliverAt(),
			BatchKey:           b.key(),
		}}}
		req.GetSend().SchemaVersion = p.schemaVersion.Load() // schema.go
		if err := stream.Send(req); err != nil {
			return mapError(err)
		}
	}
}

// errReconnect asks serve's caller to reconnect (retryable receipt error).
var errReconnect = errors.New("client: reconnect requested")

func (p *Producer) readLoop(stream clientv1.Meridian_ProduceClient) error {
	for {
		resp, err := stream.Recv()
		if err != nil {
			err = mapError(err)
			p.c.noteFailure(p.opts.Topic, err)
			return err
		}
		rc := resp.GetReceipt()
		if rc == nil {
			continue
		}
		p.mu.Lock()
		// Receipts come in send order; a receipt below the head is for a
		// batch that already timed out.
		if len(p.inflight) == 0 || rc.GetSequenceId() < p.inflight[0].firstSeq() {
			p.mu.Unlock()
			continue
		}
		idx := -1
		for i, b := range p.inflight {
			if b.firstSeq() == rc.GetSequenceId() {
				idx = i
				break
			}
		}
		if idx < 0 {
			p.mu.Unlock()
			continue
		}
		b := p.inflight[idx]
		p.stalled = 0
		if e := rc.GetError(); e != nil {
			err := errorFromProto(e)
			if retryable(err) {
				p.lastErr = err
				p.mu.Unlock()
				p.c.noteFailure(p.opts.Topic, err)
				return fmt.Errorf("%w: %w", errReconnect, err)
			}
			p.removeLocked(idx)
			p.resolveLocked(b, MessageID{}, err)
			p.mu.Unlock()
			continue
		}
		p.lastErr, p.quotaWait = nil, 0
		if rc.GetDuplicate() {
			p.duplicates.Add(1)
			p.c.metrics.duplicates.Inc()
			b.duplicate = true
		}
		p.removeLocked(idx)
		id := UnknownMessageID
		if rc.GetMessageId() != nil {
			id = idFromProto(rc.GetMessageId())
		}
		p.resolveLocked(b, id, nil)
		if len(p.inflight) == 0 && !p.opts.BatchingHoldOpen {
			// The pipe is empty: send what gathered meanwhile.
			p.closeBatchLocked()
		}
		p.mu.Unlock()
	}
}

func (p *Producer) removeLocked(i int) {
	if i == 0 {
		p.popHeadLocked()
		return
	}
	copy(p.inflight[i:], p.inflight[i+1:])
	p.inflight[len(p.inflight)-1] = nil
	p.inflight = p.inflight[:len(p.inflight)-1]
	if p.toSend > i {
		p.toSend--
	}
}
