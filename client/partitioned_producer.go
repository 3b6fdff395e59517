package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/meridianmq/meridian/internal/wire"
)

// partitionedProducer is the Producer of a partitioned topic: one
// producer per partition. A message with a key goes to partition
// wire.KeyPartition(key, N), so one key's messages keep their order (they
// share a partition and a producer); a keyless message goes round-robin,
// one batch per partition in turn (a synchronous Send is a batch of its
// own and moves on at once). After a raise of N, keys map anew (as in
// Pulsar): order per key holds among the messages sent after the producer
// saw the new count.
type partitionedProducer struct {
	c        *Client
	opts     ProducerOptions
	log      *slog.Logger
	interval time.Duration
	stop     chan struct{} // closed by Close: ends the discovery loop
	done     chan struct{} // closed when the discovery loop has ended

	closeOnce sync.Once
	closeErr  error

	// cbMu makes the SendAsync callbacks of all partitions run one at a
	// time, as a plain producer's do (each partition's run on its own
	// dispatcher goroutine).
	cbMu sync.Mutex

	// mu guards the fields below.
	mu    sync.Mutex
	parts []*Producer
	// Keyless round-robin: rrPart is the partition of the open batch,
	// rrCount the messages sent to it, rrSince when it was chosen.
	rrPart  int
	rrCount int
	rrSince time.Time
	closed  bool
}

// newPartitionedProducer returns, for a partitioned topic, a Producer
// routing to its partitions (ok true); ok false means the topic is not
// partitioned and the caller opens a plain producer.
func (c *Client) newPartitionedProducer(ctx context.Context, opts ProducerOptions) (*Producer, bool, error) {
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
	pp := &partitionedProducer{c: c, opts: opts, interval: interval,
		log:  c.log.With("topic", opts.Topic, "partitioned", true),
		stop: make(chan struct{}), done: make(chan struct{})}
	if err := pp.grow(ctx, n); err != nil {
		pp.closeParts(context.Background())
		return nil, true, err
	}
	p := &Producer{c: c, opts: opts, part: pp}
	c.track(p)
	go pp.discover()
	return p, true, nil
}

// grow opens the producers of partitions len(parts)..n-1.
func (pp *partitionedProducer) grow(ctx context.Context, n int) error {
	pp.mu.Lock()
	have := len(pp.parts)
	pp.mu.Unlock()
	for i := have; i < n; i++ {
		o := pp.opts
		o.Topic = PartitionTopic(pp.opts.Topic, i)
		p, err := pp.c.newProducer(ctx, o)
		if err != nil {
			return fmt.Errorf("partition %d of %s: %w", i, pp.opts.Topic, err)
		}
		pp.mu.Lock()
		if pp.closed {
			pp.mu.Unlock()
			_ = p.Close(ctx)
			return ErrProducerClosed
		}
		pp.parts = append(pp.parts, p)
		pp.mu.Unlock()
	}
	return nil
}

// discover checks the partition count every interval until Close.
func (pp *partitionedProducer) discover() {
	defer close(pp.done)
	t := time.NewTicker(pp.interval)
	defer t.Stop()
	for {
		select {
		case <-pp.stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), pp.c.opts.OperationTimeout)
		go func() { // Close must not wait for a slow broker
			select {
			case <-pp.stop:
				cancel()
			case <-ctx.Done():
			}
		}()
		n, err := pp.c.Partitions(ctx, pp.opts.Topic)
		if err == nil && n > pp.count() {
			pp.log.Info("partitions raised; opening the new ones", "from", pp.count(), "to", n)
			err = pp.grow(ctx, n)
		}
		cancel()
		if err != nil && !errors.Is(err, ErrProducerClosed) {
			pp.log.Warn("partition discovery failed; retrying at the next interval", "err", err)
		}
	}
}

func (pp *partitionedProducer) count() int {
	pp.mu.Lock()
	defer pp.mu.Unlock()
	return len(pp.parts)
}

// route picks m's partition; sync marks a synchronous Send (a batch of
// its own).
func (pp *partitionedProducer) route(m *Message, sync bool) (int, *Producer, error) {
	pp.mu.Lock()
	defer pp.mu.Unlock()
	if pp.closed {
		return 0, nil, ErrProducerClosed
	}
	n := len(pp.parts)
	if m.Key != "" {
		i := wire.KeyPartition(m.Key, n)
		return i, pp.parts[i], nil
	}
	now := time.Now()
	if pp.rrCount >= pp.opts.BatchingMaxMessages || now.Sub(pp.rrSince) >= pp.opts.BatchingMaxDelay {
		pp.rrPart = (pp.rrPart + 1) % n
		pp.rrCount, pp.rrSince = 0, now
	}
	i := pp.rrPart % n
	pp.rrCount++
	if sync {
		pp.rrCount = pp.opts.BatchingMaxMessages // the next message moves on
	}
	return i, pp.parts[i], nil
}

func (pp *partitionedProducer) send(ctx context.Context, m *Message) (MessageID, error) {
	if m == nil {
		return MessageID{}, fmt.Errorf("%w: nil message", ErrInvalidArgument)
	}
	i, p, err := pp.route(m, true)
	if err != nil {
		return MessageID{}, err
	}
	id, err := p.Send(ctx, m)
	if err == nil {
		id.Partition = int32(i)
	}
	return id, err
}

func (pp *partitionedProducer) sendAsync(ctx context.Context, m *Message, cb func(MessageID, *Message, error)) {
	if cb == nil {
		cb = func(MessageID, *Message, error) {}
	}
	if m == nil {
		cb(MessageID{}, m, fmt.Errorf("%w: nil message", ErrInvalidArgument))
		return
	}
	i, p, err := pp.route(m, false)
	if err != nil {
		cb(MessageID{}, m, err)
		return
	}
	p.SendAsync(ctx, m, func(id MessageID, m *Message, err error) {
		if err == nil {
			id.Partition = int32(i)
		}
		pp.cbMu.Lock()
		defer pp.cbMu.Unlock()
		cb(id, m, err)
	})
}

// snapshot returns the partitions' producers.
func (pp *partitionedProducer) snapshot() []*Producer {
	pp.mu.Lock()
	defer pp.mu.Unlock()
	return append([]*Producer(nil), pp.parts...)
}

func (pp *partitionedProducer) flush(ctx context.Context) error {
	for _, p := range pp.snapshot() {
		if err := p.Flush(ctx); err != nil {
			return err
		}
	}
	return nil
}

func (pp *partitionedProducer) stats() ProducerStats {
	var s ProducerStats
	for _, p := range pp.snapshot() {
		ps := p.Stats()
		s.Duplicates += ps.Duplicates
		s.Resent += ps.Resent
		s.Reconnects += ps.Reconnects
		s.Pending += ps.Pending
	}
	return s
}

// first returns partition 0's producer (nil after a failed open).
func (pp *partitionedProducer) first() *Producer {
	pp.mu.Lock()
	defer pp.mu.Unlock()
	if len(pp.parts) == 0 {
		return nil
	}
	return pp.parts[0]
}

func (pp *partitionedProducer) name() string {
	if p := pp.first(); p != nil {
		return p.Name()
	}
	return pp.opts.Name
}

func (pp *partitionedProducer) region() string {
	if p := pp.first(); p != nil {
		return p.Region()
	}
	return ""
}

// close flushes and closes every partition's producer (each bounded by
// ctx) and stops the discovery loop; it returns the first error.
func (pp *partitionedProducer) close(ctx context.Context, p *Producer) error {
	pp.closeOnce.Do(func() {
		pp.mu.Lock()
		pp.closed = true
		pp.mu.Unlock()
		close(pp.stop)
		<-pp.done
		pp.closeErr = pp.closeParts(ctx)
		pp.c.untrack(p)
	})
	return pp.closeErr
}

func (pp *partitionedProducer) closeParts(ctx context.Context) error {
	var first error
	for _, p := range pp.snapshot() {
		if err := p.Close(ctx); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// Partitions returns the number of partitions the producer writes to: 0
// for a topic that is not partitioned.
func (p *Producer) Partitions() int {
	if p.part == nil {
		return 0
	}
	return p.part.count()
}
