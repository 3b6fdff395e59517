package ledger

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/experimental"

	bookiev1 "github.com/meridianmq/meridian/api/bookie/v1"
	"github.com/meridianmq/meridian/bookie"
)

// addCallback receives the outcome of one add sent on a bookie's stream:
// nil when the bookie made it durable.
type addCallback func(err error)

// bookieConn is the one gRPC connection to one bookie, shared by every
// ledger of the client, with one multiplexed AddEntries stream.
type bookieConn struct {
	id   string
	addr string
	// instance is the bookie instance (cookie) every request names; a
	// bookie that is not this instance answers "wrong bookie".
	instance string
	cc       *grpc.ClientConn
	client   bookiev1.BookieClient
	log      *slog.Logger

	sendq        chan *queuedAdd // bounded; drained by sendLoop
	queueTimeout time.Duration
	done         chan struct{}
	wg           sync.WaitGroup

	// mu guards the fields below.
	mu      sync.Mutex
	stream  *addStream
	nextReq uint64
	closed  bool
}

type queuedAdd struct {
	req *bookiev1.AddEntryRequest
	cb  addCallback
}

// addStream is one open AddEntries stream and the adds waiting on it.
type addStream struct {
	s      grpc.BidiStreamingClient[bookiev1.AddEntriesRequest, bookiev1.AddEntriesResponse]
	cancel context.CancelFunc
	// mu guards pending and dead.
	mu      sync.Mutex
	pending map[uint64]addCallback
	dead    bool
}

// failAll ends the stream: every waiting add gets err. Idempotent.
func (st *addStream) failAll(err error) {
	st.mu.Lock()
	if st.dead {
		st.mu.Unlock()
		return
	}
	st.dead = true
	p := st.pending
	st.pending = nil
	st.mu.Unlock()
	st.cancel()
	for _, cb := range p {
		cb(err)
	}
}

func newBookieConn(id, addr, instance string, cfg *Config, log *slog.Logger) (*bookieConn, error) {
	opts := []grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(
			grpc.MaxCallRecvMsgSize(max(cfg.MaxEntryBytes, bookie.MaxAddBatchBytes)+(1<<20)),
			grpc.MaxCallSendMsgSize(max(cfg.MaxEntryBytes, bookie.MaxAddBatchBytes)+(1<<20)),
			grpc.ForceCodecV2(bookie.Codec()),
		),
		// gRPC's default pool zeroes a 1 MiB buffer for every message
		// between 32 KiB and 1 MiB; the bookie's pool does not.
		experimental.WithBufferPool(bookie.BufferPool()),
		// Reconnect quickly after a bookie restarts: fail-fast RPCs during
		// the backoff would otherwise fail for up to two minutes.
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
			MinConnectTimeout: 2 * time.Second,
		}),
		// Large windows: a few hundred 64 KiB adds in flight per stream.
		grpc.WithInitialWindowSize(8 << 20),
		grpc.WithInitialConnWindowSize(16 << 20),
	}
	// Every request names the bookie and instance meant: a process at the
	// address that is not that bookie instance answers nothing but
	// "wrong bookie" (a dead bookie's address reused, a wiped bookie).
	opts = append(opts, bookie.WithExpectedIdentity(bookie.FixedIdentity(id, instance))...)
	opts = append(opts, cfg.DialOptions...)
	cc, err := grpc.NewClient(addr, opts...)
	if err != nil {
		return nil, fmt.Errorf("ledger: dial bookie %s at %s: %w", id, addr, err)
	}
	c := &bookieConn{
		id:           id,
		addr:         addr,
		instance:     instance,
		cc:           cc,
		client:       bookiev1.NewBookieClient(cc),
		log:          log.With("bookie", id, "addr", addr, "instance", instance),
		sendq:        make(chan *queuedAdd, cfg.BookieSendQueue),
		queueTimeout: cfg.AddTimeout,
		done:         make(chan struct{}),
	}
	c.wg.Add(1)
	go c.sendLoop(cfg.AddTimeout)
	return c, nil
}

// add queues req for the bookie; cb is called exactly once with the
// outcome. It blocks while the bookie's send queue is full.
// A queue that stays full for queueTimeout (a hung bookie) fails the add.
func (c *bookieConn) add(req *bookiev1.AddEntryRequest, cb addCallback) {
	q := &queuedAdd{req: req, cb: cb}
	select {
	case c.sendq <- q:
		return
	default:
	}
	t := time.NewTimer(c.queueTimeout)
	defer t.Stop()
	select {
	case c.sendq <- q:
	case <-c.done:
		cb(&bookieError{bookie: c.id, code: codes.Unavailable, msg: "ledger client closed"})
	case <-t.C:
		cb(&bookieError{bookie: c.id, code: codes.DeadlineExceeded, msg: fmt.Sprintf("send queue full for %v", c.queueTimeout)})
	}
}

// maxBatchEntries bounds the adds coalesced into one AddEntries message
// (bytes are bounded by bookie.MaxAddBatchBytes).
const maxBatchEntries = 512

// sendLoop sends queued adds on the stream, (re)opening it when needed.
// Whatever is queued when it is ready to send goes out as one message
// (bounded by maxBatchEntries and bookie.MaxAddBatchBytes): batches grow
// with load and nothing waits for a batch to fill.
func (c *bookieConn) sendLoop(openTimeout time.Duration) {
	defer c.wg.Done()
	var (
		carry *queuedAdd // taken from the queue but did not fit the last batch
		batch []*queuedAdd
		msg   = &bookiev1.AddEntriesRequest{}
	)
	for {
		q := carry
		carry = nil
		if q == nil {
			select {
			case q = <-c.sendq:
			case <-c.done:
				c.drain()
				return
			}
		}
		batch = append(batch[:0], q)
		bytes := len(q.req.Payload)
	gather:
		for len(batch) < maxBatchEntries {
			select {
			case q := <-c.sendq:
				if bytes+len(q.req.Payload) > bookie.MaxAddBatchBytes {
					carry = q
					break gather
				}
				batch = append(batch, q)
				bytes += len(q.req.Payload)
			default:
				break gather
			}
		}
		c.sendBatch(batch, msg, openTimeout)
		clear(batch)
	}
}

// sendBatch sends batch as one message on the current stream.
func (c *bookieConn) sendBatch(batch []*queuedAdd, msg *bookiev1.AddEntriesRequest, openTimeout time.Duration) {
	st, err := c.currentStream(openTimeout)
	if err != nil {
		berr := asBookieError(c.id, err)
		for _, q := range batch {
			q.cb(berr)
		}
		return
	}
	c.mu.Lock()
	for _, q := range batch {
		c.nextReq++
		q.req.RequestId = c.nextReq
	}
	c.mu.Unlock()
	st.mu.Lock()
	if st.dead {
		st.mu.Unlock()
		for _, q := range batch {
			q.cb(&bookieError{bookie: c.id, code: codes.Unavailable, msg: "add stream broken"})
		}
		return
	}
	msg.Entries = msg.Entries[:0]
	for _, q := range batch {
		st.pending[q.req.RequestId] = q.cb
		msg.Entries = append(msg.Entries, q.req)
	}
	st.mu.Unlock()
	err = st.s.Send(msg)
	clear(msg.Entries)
	if err != nil {
		// The real cause comes from Recv; fail everything on this stream.
		st.failAll(&bookieError{bookie: c.id, code: codes.Unavailable, msg: "add stream send: " + err.Error()})
		c.clearStream(st)
	}
}

func (c *bookieConn) drain() {
	for {
		select {
		case q := <-c.sendq:
			q.cb(&bookieError{bookie: c.id, code: codes.Unavailable, msg: "ledger client closed"})
		default:
			return
		}
	}
}

func (c *bookieConn) clearStream(st *addStream) {
	c.mu.Lock()
	if c.stream == st {
		c.stream = nil
	}
	c.mu.Unlock()
}

// currentStream returns the open add stream, opening one if needed. Only
// sendLoop calls it.
func (c *bookieConn) currentStream(openTimeout time.Duration) (*addStream, error) {
	c.mu.Lock()
	st := c.stream
	closed := c.closed
	c.mu.Unlock()
	if closed {
		return nil, &bookieError{bookie: c.id, code: codes.Unavailable, msg: "ledger client closed"}
	}
	if st != nil {
		return st, nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	// Opening a stream waits for a ready connection; bound that wait so a
	// dead bookie fails adds (and gets replaced) instead of hanging them.
	timer := time.AfterFunc(openTimeout, cancel)
	s, err := c.client.AddEntries(ctx)
	if !timer.Stop() && err == nil {
		err = fmt.Errorf("open add stream: no ready connection after %v", openTimeout)
	}
	if err != nil {
		cancel()
		return nil, err
	}
	st = &addStream{s: s, cancel: cancel, pending: make(map[uint64]addCallback)}
	c.mu.Lock()
	c.stream = st
	c.mu.Unlock()
	c.wg.Add(1)
	go c.recvLoop(st)
	return st, nil
}

func (c *bookieConn) recvLoop(st *addStream) {
	defer c.wg.Done()
	var cbs []addCallback
	for {
		m, err := st.s.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = errors.New("stream ended by bookie")
			}
			c.clearStream(st)
			st.failAll(asBookieError(c.id, err))
			return
		}
		cbs = cbs[:0]
		st.mu.Lock()
		for _, r := range m.Results {
			cb, ok := st.pending[r.RequestId]
			if ok {
				delete(st.pending, r.RequestId)
			}
			cbs = append(cbs, cb)
		}
		st.mu.Unlock()
		for i, r := range m.Results {
			cb := cbs[i]
			if cb == nil {
				continue
			}
			if r.Code == 0 {
				cb(nil)
			} else {
				cb(&bookieError{bookie: c.id, code: codes.Code(r.Code), msg: r.Message})
			}
		}
		clear(cbs)
	}
}

func (c *bookieConn) close() {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	st := c.stream
	c.stream = nil
	c.mu.Unlock()
	close(c.done)
	if st != nil {
		st.failAll(&bookieError{bookie: c.id, code: codes.Unavailable, msg: "ledger client closed"})
	}
	c.wg.Wait()
	c.cc.Close()
}
