package client

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
	"github.com/meridianmq/meridian/internal/wire"
)

func pm(seq int64, size int) pendingMsg {
	return pendingMsg{msg: &Message{Payload: make([]byte, size)}, seq: seq, accepted: time.Now()}
}

func TestBatchBuilderClosesAtCount(t *testing.T) {
	bb := newBatchBuilder(3, 1<<20)
	for i := range 2 {
		if closed, full := bb.add(pm(int64(i), 10)); closed != nil || full {
			t.Fatalf("msg %d: closed=%v full=%v", i, closed, full)
		}
	}
	if _, full := bb.add(pm(2, 10)); !full {
		t.Fatal("third message should fill the batch")
	}
	b := bb.take()
	if len(b.msgs) != 3 || b.firstSeq() != 0 || b.lastSeq() != 2 || b.bytes != 30 {
		t.Fatalf("batch = %d msgs, seq %d..%d, %d bytes", len(b.msgs), b.firstSeq(), b.lastSeq(), b.bytes)
	}
	if !bb.empty() || bb.take() != nil {
		t.Fatal("builder should be empty after take")
	}
}

func TestBatchBuilderClosesBeforeOverflowingBytes(t *testing.T) {
	bb := newBatchBuilder(100, 100)
	bb.add(pm(0, 60))
	closed, full := bb.add(pm(1, 60)) // would make 120 > 100
	if closed == nil || len(closed.msgs) != 1 || closed.firstSeq() != 0 {
		t.Fatalf("expected the first batch closed before adding, got %+v", closed)
	}
	if full || bb.len() != 1 {
		t.Fatalf("new batch: full=%v len=%d", full, bb.len())
	}
	// A message larger than the byte bound goes alone in its own batch.
	closed, full = bb.add(pm(2, 500))
	if closed == nil || closed.firstSeq() != 1 || !full || bb.len() != 1 {
		t.Fatalf("oversize message: closed=%+v full=%v len=%d", closed, full, bb.len())
	}
}

func TestPendingLimiterFailsOrBlocks(t *testing.T) {
	closed := make(chan struct{})
	l := newPendingLimiter(2, false)
	ctx := context.Background()
	for range 2 {
		if err := l.acquire(ctx, closed); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.acquire(ctx, closed); !errors.Is(err, ErrProducerQueueFull) {
		t.Fatalf("full non-blocking limiter: %v", err)
	}
	l.release(1)
	if err := l.acquire(ctx, closed); err != nil {
		t.Fatalf("after release: %v", err)
	}

	bl := newPendingLimiter(1, true)
	_ = bl.acquire(ctx, closed)
	tctx, cancel := context.WithTimeout(ctx, 30*time.Millisecond)
	defer cancel()
	if err := bl.acquire(tctx, closed); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("blocking limiter with deadline: %v", err)
	}
	got := make(chan error, 1)
	go func() { got <- bl.acquire(ctx, closed) }()
	select {
	case err := <-got:
		t.Fatalf("acquire should block, returned %v", err)
	case <-time.After(20 * time.Millisecond):
	}
	bl.release(1)
	if err := <-got; err != nil {
		t.Fatalf("blocked acquire after release: %v", err)
	}
	go func() { got <- bl.acquire(ctx, closed) }()
	close(closed)
	if err := <-got; !errors.Is(err, ErrProducerClosed) {
		t.Fatalf("blocked acquire on close: %v", err)
	}
}

func TestBackoffGrowsAndCaps(t *testing.T) {
	b := newBackoff(10*time.Millisecond, 80*time.Millisecond)
	var prev time.Duration
	for i := range 8 {
		d := b.delay()
		step := min(10*time.Millisecond<<i, 80*time.Millisecond)
		if d < step*8/10 || d > step*12/10 {
			t.Fatalf("delay %d = %v, want %v ±20%%", i, d, step)
		}
		prev = d
	}
	_ = prev
	b.reset()
	if d := b.delay(); d > 12*time.Millisecond {
		t.Fatalf("after reset: %v", d)
	}
}

func TestDispatcherRunsInOrderAndDrainsOnClose(t *testing.T) {
	d := newDispatcher()
	go d.run()
	var mu sync.Mutex
	var got []int
	for i := range 100 {
		d.push(func() { mu.Lock(); got = append(got, i); mu.Unlock() })
	}
	d.close()
	if len(got) != 100 {
		t.Fatalf("ran %d of 100", len(got))
	}
	for i, v := range got {
		if v != i {
			t.Fatalf("order: got[%d] = %d", i, v)
		}
	}
	ran := false
	d.push(func() { ran = true }) // after close: inline
	if !ran {
		t.Fatal("push after close should run inline")
	}
}

func TestEncodeBatchRoundTripsThroughWire(t *testing.T) {
	for _, c := range []Compression{CompressionNone, CompressionZstd, CompressionS2} {
		ev := time.UnixMilli(1_700_000_000_123)
		b := &batch{msgs: []pendingMsg{
			{msg: &Message{Key: "a", Payload: bytes.Repeat([]byte("x"), 5000), Properties: map[string]string{"p": "1"}, EventTime: ev}, seq: 7},
			{msg: &Message{Payload: []byte("second")}, seq: 8},
		}}
		payload, usize, err := encodeBatch(b, c)
		if err != nil {
			t.Fatal(err)
		}
		if c != CompressionNone && int64(len(payload)) >= usize {
			t.Fatalf("%v: payload %d not smaller than %d", c, len(payload), usize)
		}
		md := &clientv1.EntryMetadata{ProducerName: "p1", SequenceId: 7, NumMessages: 2, Compression: compressionToProto(c),
			UncompressedSize: usize, PublishTimeMs: 1_700_000_000_999, OriginRegion: "r1"}
		// Round trip through the stored framing too, as the broker does.
		ent, err := wire.EncodeEntry(md, payload)
		if err != nil {
			t.Fatal(err)
		}
		md2, p2, err := wire.DecodeEntry(ent)
		if err != nil {
			t.Fatal(err)
		}
		msgs, err := decodeEntryMessage(&clientv1.Message{MessageId: &clientv1.MessageId{LedgerId: 3, EntryId: 4}, Metadata: md2, Payload: p2, RedeliveryCount: 2}, wire.MaxUncompressedBytes)
		if err != nil {
			t.Fatalf("%v: %v", c, err)
		}
		if len(msgs) != 2 {
			t.Fatalf("%d messages", len(msgs))
		}
		m0, m1 := msgs[0], msgs[1]
		if m0.ID != (MessageID{LedgerID: 3, EntryID: 4, BatchIndex: 0}) || m1.ID != (MessageID{LedgerID: 3, EntryID: 4, BatchIndex: 1}) || m0.Key != "a" || len(m0.Payload) != 5000 ||
			m0.Properties["p"] != "1" || !m0.EventTime.Equal(ev) || string(m1.Payload) != "second" || !m1.EventTime.IsZero() ||
			m0.SequenceID != 7 || m1.SequenceID != 8 || m0.ProducerName != "p1" || m0.OriginRegion != "r1" ||
			m0.RedeliveryCount != 2 || m0.PublishTime.UnixMilli() != 1_700_000_000_999 {
			t.Fatalf("%v: decoded %+v / %+v", c, m0, m1)
		}
	}
}

// newUnconnectedProducer builds a producer whose batches are never sent:
// it exercises batching, back-pressure and timeouts without a broker.
func newUnconnectedProducer(t *testing.T, opts ProducerOptions) *Producer {
	t.Helper()
	opts.Topic = "public/default/t"
	opts = opts.withDefaults()
	if err := opts.Validate(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Producer{
		c:       &Client{opts: Options{}.withDefaults(), log: slog.New(slog.DiscardHandler), owned: map[closer]struct{}{}, metrics: newClientMetrics(nil)},
		opts:    opts,
		log:     slog.New(slog.DiscardHandler),
		limiter: newPendingLimiter(opts.MaxPendingMessages, opts.BlockIfQueueFull),
		disp:    newDispatcher(),
		closeCh: make(chan struct{}),
		doneCh:  make(chan struct{}),
		ctx:     ctx,
		cancel:  cancel,
		builder: newBatchBuilder(opts.BatchingMaxMessages, opts.BatchingMaxBytes),
		wake:    make(chan struct{}, 1),
	}
	close(p.doneCh) // no run loop
	go p.disp.run()
	go p.timeoutLoop()
	t.Cleanup(func() {
		// Nothing is ever acknowledged: bound the flush in Close.
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		_ = p.Close(ctx)
	})
	return p
}

func TestProducerQueueFullFailsFast(t *testing.T) {
	p := newUnconnectedProducer(t, ProducerOptions{MaxPendingMessages: 5, SendTimeout: -1, BatchingMaxDelay: time.Hour})
	ctx := context.Background()
	errs := make(chan error, 10)
	for range 7 {
		p.SendAsync(ctx, &Message{Payload: []byte("x")}, func(_ MessageID, _ *Message, err error) { errs <- err })
	}
	for range 2 {
		if err := <-errs; !errors.Is(err, ErrProducerQueueFull) {
			t.Fatalf("6th/7th send: %v", err)
		}
	}
	select {
	case err := <-errs:
		t.Fatalf("accepted sends resolved early: %v", err)
	default:
	}
	if got := p.Stats().Pending; got != 5 {
		t.Fatalf("pending = %d, want 5", got)
	}
	// Sequence IDs are assigned consecutively to accepted messages only.
	p.mu.Lock()
	seq := p.nextSeq
	p.mu.Unlock()
	if seq != 5 {
		t.Fatalf("nextSeq = %d, want 5", seq)
	}
}

func TestProducerBlockIfQueueFullWaitsForContext(t *testing.T) {
	p := newUnconnectedProducer(t, ProducerOptions{MaxPendingMessages: 2, BlockIfQueueFull: true, SendTimeout: -1})
	ctx := context.Background()
	for range 2 {
		p.SendAsync(ctx, &Message{Payload: []byte("x")}, nil)
	}
	tctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	errc := make(chan error, 1)
	p.SendAsync(tctx, &Message{Payload: []byte("x")}, func(_ MessageID, _ *Message, err error) { errc <- err })
	if err := <-errc; !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("blocked send: %v", err)
	}
	if time.Since(start) < 40*time.Millisecond {
		t.Fatal("send returned before the context deadline")
	}
}

func TestProducerSendTimeoutFailsInOrderAndFreesSlots(t *testing.T) {
	p := newUnconnectedProducer(t, ProducerOptions{MaxPendingMessages: 10, SendTimeout: 50 * time.Millisecond,
		BatchingMaxMessages: 2, BatchingMaxDelay: time.Millisecond})
	ctx := context.Background()
	var mu sync.Mutex
	var order []int64
	done := make(chan struct{})
	for i := range 5 {
		p.SendAsync(ctx, &Message{Payload: []byte{byte(i)}}, func(_ MessageID, m *Message, err error) {
			if !errors.Is(err, ErrSendTimeout) {
				t.Errorf("message %d: %v", m.Payload[0], err)
			}
			mu.Lock()
			order = append(order, int64(m.Payload[0]))
			if len(order) == 5 {
				close(done)
			}
			mu.Unlock()
		})
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("messages did not time out")
	}
	for i, v := range order {
		if v != int64(i) {
			t.Fatalf("timeout order %v", order)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for p.Stats().Pending != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("pending = %d after timeouts", p.Stats().Pending)
		}
		time.Sleep(time.Millisecond)
	}
	// Flush returns at once: nothing is unresolved.
	fctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if err := p.Flush(fctx); err != nil {
		t.Fatal(err)
	}
}

func TestProducerRejectsOversizeAndClosed(t *testing.T) {
	p := newUnconnectedProducer(t, ProducerOptions{MaxMessageSize: 100, SendTimeout: -1})
	ctx := context.Background()
	_, err := p.Send(ctx, &Message{Payload: make([]byte, 101)})
	if !errors.Is(err, ErrMessageTooLarge) {
		t.Fatalf("oversize: %v", err)
	}
	// Close fails what is pending with ErrProducerClosed.
	errc := make(chan error, 1)
	p.SendAsync(ctx, &Message{Payload: []byte("x")}, func(_ MessageID, _ *Message, err error) { errc <- err })
	cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	_ = p.Close(cctx)
	if err := <-errc; !errors.Is(err, ErrProducerClosed) {
		t.Fatalf("pending at close: %v", err)
	}
	if _, err := p.Send(ctx, &Message{Payload: []byte("y")}); !errors.Is(err, ErrProducerClosed) {
		t.Fatalf("send after close: %v", err)
	}
}

// TestProducerSendsAtOnceWhenIdle: with nothing in flight a message is sent
// at once whatever BatchingMaxDelay says; while a batch is in flight the
// next ones gather; BatchingHoldOpen keeps a lone message waiting.
func TestProducerSendsAtOnceWhenIdle(t *testing.T) {
	state := func(p *Producer) (inflight, open int) {
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.builder.cur != nil {
			open = len(p.builder.cur.msgs)
		}
		return len(p.inflight), open
	}
	ctx := context.Background()
	p := newUnconnectedProducer(t, ProducerOptions{SendTimeout: -1, BatchingMaxDelay: time.Hour})
	p.SendAsync(ctx, &Message{Payload: []byte("a")}, nil)
	if in, open := state(p); in != 1 || open != 0 {
		t.Fatalf("first send: %d batches in flight, %d messages in the open batch; want 1, 0", in, open)
	}
	for range 3 {
		p.SendAsync(ctx, &Message{Payload: []byte("b")}, nil)
	}
	if in, open := state(p); in != 1 || open != 3 {
		t.Fatalf("sends behind one in flight: %d batches in flight, %d open; want 1, 3", in, open)
	}

	held := newUnconnectedProducer(t, ProducerOptions{SendTimeout: -1, BatchingMaxDelay: time.Hour, BatchingHoldOpen: true})
	held.SendAsync(ctx, &Message{Payload: []byte("a")}, nil)
	if in, open := state(held); in != 0 || open != 1 {
		t.Fatalf("BatchingHoldOpen: %d batches in flight, %d open; want 0, 1", in, open)
	}
}
