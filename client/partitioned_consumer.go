package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// partitionedConsumer is the Consumer of a partitioned topic: one consumer
// per partition, same subscription name and options, merged into one
// stream. A pump per partition moves its messages, in order, into a
// shared queue, so the messages of one partition (hence of one key)
// arrive in the order that partition delivers them; partitions interleave
// freely. Received IDs carry their Partition, and Ack, AckCumulative and
// Nack go to that partition's consumer. New partitions are subscribed
// every PartitionsAutoDiscoveryInterval.
type partitionedConsumer struct {
	c        *Client
	opts     ConsumerOptions
	log      *slog.Logger
	interval time.Duration
	queue    chan *ReceivedMessage
	ctx      context.Context // ends at Close
	cancel   context.CancelFunc
	wg       sync.WaitGroup // the discovery loop
	pumps    sync.WaitGroup // the pumps

	closeOnce sync.Once
	closeErr  error

	// changeMu serializes the changes of the set of partitions and pumps:
	// grow, and seek (which stops every pump, moves the partitions and
	// starts them again).
	changeMu sync.Mutex

	// mu guards the fields below.
	mu    sync.Mutex
	parts []*Consumer
	// pumpCtx ends the current pumps (cancelled by seek and Close).
	pumpCtx    context.Context
	pumpCancel context.CancelFunc
}

// newPartitionedConsumer returns, for a partitioned topic, a Consumer
// merging its partitions (ok true); ok false means the topic is not
// partitioned and the caller subscribes as usual.
func (c *Client) newPartitionedConsumer(ctx context.Context, opts ConsumerOptions) (*Consumer, bool, error) {
	interval, err := discoveryInterval(opts.PartitionsAutoDiscoveryInterval)
	if err != nil {
		return nil, true, err
	}
	// Bad options fail before any broker is asked, as for a plain topic.
	opts = opts.withDefaults()
	if err := opts.Validate(); err != nil {
		return nil, true, err
	}
	n, err := c.Partitions(ctx, opts.Topic)
	if err != nil {
		return nil, true, err
	}
	if n == 0 {
		return nil, false, nil
	}
	if opts.Start != nil && opts.Start.kind != startInitial && opts.Start.kind != startTime {
		return nil, true, fmt.Errorf("%w: start position %s on partitioned topic %s: a message ID names one partition; start from a time, earliest or latest", ErrNotAllowed, opts.Start, opts.Topic)
	}
	cctx, cancel := context.WithCancel(context.Background())
	pc := &partitionedConsumer{c: c, opts: opts, interval: interval, ctx: cctx, cancel: cancel,
		log:   c.log.With("topic", opts.Topic, "subscription", opts.Subscription, "partitioned", true),
		queue: make(chan *ReceivedMessage, opts.ReceiverQueueSize)}
	pc.pumpCtx, pc.pumpCancel = context.WithCancel(cctx)
	if err := pc.grow(ctx, n, false); err != nil {
		cancel()
		_ = pc.closeParts(context.Background())
		pc.pumps.Wait()
		return nil, true, err
	}
	co := &Consumer{c: c, opts: opts, part: pc, ctx: cctx, cancel: cancel}
	c.track(co)
	pc.wg.Add(1)
	go pc.discover()
	return co, true, nil
}

// grow subscribes partitions len(parts)..n-1 and starts their pumps.
// Partitions added by a raise (added) are subscribed from the earliest
// message, as Pulsar does: producers may have written to a new partition
// before this consumer saw it, and those messages belong to the
// subscription.
func (pc *partitionedConsumer) grow(ctx context.Context, n int, added bool) error {
	pc.changeMu.Lock()
	defer pc.changeMu.Unlock()
	pc.mu.Lock()
	have := len(pc.parts)
	pc.mu.Unlock()
	for i := have; i < n; i++ {
		o := pc.opts
		o.Topic = PartitionTopic(pc.opts.Topic, i)
		if dl := pc.opts.DeadLetter; dl != nil {
			// Every partition dead-letters to the partitioned topic's
			// dead-letter topic, as Pulsar does. Retry topics stay per
			// partition: each partition's consumer subscribes to its own
			// (one subscription of one type per retry topic).
			d := *dl
			d.Topic = dl.dlqTopic(pc.opts)
			o.DeadLetter = &d
		}
		if added && o.Start == nil {
			o.InitialPosition = Earliest
		}
		co, err := pc.c.subscribe(ctx, o)
		if err != nil {
			return fmt.Errorf("partition %d of %s: %w", i, pc.opts.Topic, err)
		}
		pc.mu.Lock()
		if pc.ctx.Err() != nil {
			pc.mu.Unlock()
			_ = co.Close(ctx)
			return ErrConsumerClosed
		}
		pc.parts = append(pc.parts, co)
		pc.startPumpLocked(i, co)
		pc.mu.Unlock()
	}
	return nil
}

// startPumpLocked starts partition i's pump under the current pumpCtx.
func (pc *partitionedConsumer) startPumpLocked(i int, co *Consumer) {
	pc.pumps.Add(1)
	go pc.pump(pc.pumpCtx, i, co)
}

// pump moves partition i's messages into the shared queue, in order,
// until ctx ends. A message it holds when ctx ends is dropped: it was
// never acknowledged, and the seek or close that ended ctx makes the
// broker deliver it again (or count it acknowledged, for a seek past it).
func (pc *partitionedConsumer) pump(ctx context.Context, i int, co *Consumer) {
	defer pc.pumps.Done()
	for {
		m, err := co.Receive(ctx)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, ErrConsumerClosed) {
				return
			}
			pc.log.Warn("partition receive failed", "partition", i, "err", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(100 * time.Millisecond):
			}
			continue
		}
		m.ID.Partition = int32(i)
		select {
		case pc.queue <- m:
		case <-ctx.Done():
			return
		}
	}
}

// discover checks the partition count every interval until Close.
func (pc *partitionedConsumer) discover() {
	defer pc.wg.Done()
	t := time.NewTicker(pc.interval)
	defer t.Stop()
	for {
		select {
		case <-pc.ctx.Done():
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(pc.ctx, pc.c.opts.OperationTimeout)
		n, err := pc.c.Partitions(ctx, pc.opts.Topic)
		if err == nil && n > pc.count() {
			pc.log.Info("partitions raised; subscribing the new ones", "from", pc.count(), "to", n)
			err = pc.grow(ctx, n, true)
		}
		cancel()
		if err != nil && pc.ctx.Err() == nil {
			pc.log.Warn("partition discovery failed; retrying at the next interval", "err", err)
		}
	}
}

func (pc *partitionedConsumer) count() int {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	return len(pc.parts)
}

func (pc *partitionedConsumer) snapshot() []*Consumer {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	return append([]*Consumer(nil), pc.parts...)
}

// partition returns the consumer of id's partition and id as that
// consumer knows it (Partition 0).
func (pc *partitionedConsumer) partition(id MessageID) (*Consumer, MessageID, error) {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	if id.Partition < 0 || int(id.Partition) >= len(pc.parts) {
		return nil, id, fmt.Errorf("%w: message ID %s names partition %d; topic %s has %d", ErrInvalidArgument, id, id.Partition, pc.opts.Topic, len(pc.parts))
	}
	co := pc.parts[id.Partition]
	id.Partition = 0
	return co, id, nil
}

func (pc *partitionedConsumer) receive(ctx context.Context) (*ReceivedMessage, error) {
	select {
	case m := <-pc.queue:
		return m, nil
	case <-pc.ctx.Done():
		return nil, ErrConsumerClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (pc *partitionedConsumer) ack(ctx context.Context, id MessageID) error {
	co, pid, err := pc.partition(id)
	if err != nil {
		return err
	}
	return co.Ack(ctx, pid)
}

// ackCumulative acknowledges up to id within id's partition only (as
// Pulsar does): the other partitions' positions are independent.
func (pc *partitionedConsumer) ackCumulative(ctx context.Context, id MessageID) error {
	co, pid, err := pc.partition(id)
	if err != nil {
		return err
	}
	return co.AckCumulative(ctx, pid)
}

func (pc *partitionedConsumer) nack(ctx context.Context, id MessageID) error {
	co, pid, err := pc.partition(id)
	if err != nil {
		return err
	}
	return co.Nack(ctx, pid)
}

// reconsumeLater hands msg to its partition's consumer (which owns the
// retry topic of that partition).
func (pc *partitionedConsumer) reconsumeLater(ctx context.Context, msg *ReceivedMessage, delay time.Duration) error {
	co, pid, err := pc.partition(msg.ID)
	if err != nil {
		return err
	}
	m := *msg
	m.ID = pid
	return co.ReconsumeLater(ctx, &m, delay)
}

// seek moves every partition to sp: a time, earliest or latest (a
// message ID names one partition's ledger, so it is refused).
func (pc *partitionedConsumer) seek(ctx context.Context, sp StartPosition) error {
	if sp.kind != startInitial && sp.kind != startTime {
		return fmt.Errorf("%w: seek to %s on partitioned topic %s: a message ID names one partition; seek to a time, earliest or latest", ErrNotAllowed, sp, pc.opts.Topic)
	}
	pc.changeMu.Lock()
	defer pc.changeMu.Unlock()
	// Stop the pumps first: a message a pump holds, or has queued, comes
	// from the old position and must not be received after Seek returns.
	pc.mu.Lock()
	pc.pumpCancel()
	pc.mu.Unlock()
	pc.pumps.Wait()
	for drained := false; !drained; {
		select {
		case <-pc.queue:
		default:
			drained = true
		}
	}
	var err error
	for i, co := range pc.snapshot() {
		if serr := co.Seek(ctx, sp); serr != nil {
			err = fmt.Errorf("seek partition %d of %s: %w", i, pc.opts.Topic, serr)
			break
		}
	}
	// Restart the pumps (also after a failed seek: the consumer goes on).
	pc.mu.Lock()
	defer pc.mu.Unlock()
	if pc.ctx.Err() != nil {
		return ErrConsumerClosed
	}
	pc.pumpCtx, pc.pumpCancel = context.WithCancel(pc.ctx)
	for i, co := range pc.parts {
		pc.startPumpLocked(i, co)
	}
	return err
}

func (pc *partitionedConsumer) name() string {
	if ps := pc.snapshot(); len(ps) > 0 {
		return ps[0].Name()
	}
	return pc.opts.Name
}

// isActive reports whether this consumer is active on any partition (a
// Failover subscription picks an active consumer per partition).
func (pc *partitionedConsumer) isActive() bool {
	for _, co := range pc.snapshot() {
		if co.IsActive() {
			return true
		}
	}
	return false
}

func (pc *partitionedConsumer) unsubscribe(ctx context.Context, co *Consumer) error {
	for i, p := range pc.snapshot() {
		if err := p.Unsubscribe(ctx); err != nil && !errors.Is(err, ErrConsumerClosed) {
			return fmt.Errorf("unsubscribe partition %d of %s: %w", i, pc.opts.Topic, err)
		}
	}
	return pc.close(ctx, co)
}

func (pc *partitionedConsumer) close(ctx context.Context, co *Consumer) error {
	pc.closeOnce.Do(func() {
		pc.cancel()
		pc.closeErr = pc.closeParts(ctx)
		// A grow or seek under way ends (its context or its consumers are
		// closed) and starts no pump after this.
		pc.wg.Wait() // the discovery loop (its grow takes changeMu)
		pc.changeMu.Lock()
		pc.pumps.Wait()
		pc.changeMu.Unlock()
		pc.c.untrack(co)
	})
	return pc.closeErr
}

func (pc *partitionedConsumer) closeParts(ctx context.Context) error {
	var first error
	for _, p := range pc.snapshot() {
		if err := p.Close(ctx); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// Partitions returns the number of partitions the consumer receives from:
// 0 for a topic that is not partitioned.
func (co *Consumer) Partitions() int {
	if co.part == nil {
		return 0
	}
	return co.part.count()
}
