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

	bookiev1 "github.com/meridianmq/meridian/api/bookie/v1"
)

// addCallback receives the outcome of one add sent on a bookie's stream:
// nil when the bookie made it durable.
type addCallback func(err error)

// bookieConn is the one gRPC connection to one bookie, shared by every
// ledger of the client, with one multiplexed AddEntries stream.
type bookieConn struct {
	id     string
	addr   string
	cc     *grpc.ClientConn
	client bookiev1.BookieClient
	log    *slog.Logger

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
	s      grpc.BidiStreamingClient[bookiev1.AddEntryRequest, bookiev1.AddEntryResponse]
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

func newBookieConn(id, addr string, cfg *Config, log *slog.Logger) (*bookieConn, error) {
	opts := []grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(
			grpc.MaxCallRecvMsgSize(cfg.MaxEntryBytes+(1<<20)),
			grpc.MaxCallSendMsgSize(cfg.MaxEntryBytes+(1<<20)),
		),
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
	opts = append(opts, cfg.DialOptions...)
	cc, err := grpc.NewClient(addr, opts...)
	if err != nil {
		return nil, fmt.Errorf("ledger: dial bookie %s at %s: %w", id, addr, err)
	}
	c := &bookieConn{
		id:           id,
		addr:         addr,
		cc:           cc,
		client:       bookiev1.NewBookieClient(cc),
		log:          log.With("bookie", id, "addr", addr),
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

// sendLoop sends queued adds on the stream, (re)opening it when needed.
func (c *bookieConn) sendLoop(openTimeout time.Duration) {
	defer c.wg.Done()
	for {
		var q *queuedAdd
		select {
		case q = <-c.sendq:
		case <-c.done:
			c.drain()
			return
		}
		st, err := c.currentStream(openTimeout)
		if err != nil {
			q.cb(asBookieError(c.id, err))
			continue
		}
		c.mu.Lock()
		c.nextReq++
		q.req.RequestId = c.nextReq
		c.mu.Unlock()
		st.mu.Lock()
		if st.dead {
			st.mu.Unlock()
			q.cb(&bookieError{bookie: c.id, code: codes.Unavailable, msg: "add stream broken"})
			continue
		}
		st.pending[q.req.RequestId] = q.cb
		st.mu.Unlock()
		if err := st.s.Send(q.req); err != nil {
			// The real cause comes from Recv; fail everything on this stream.
			st.failAll(&bookieError{bookie: c.id, code: codes.Unavailable, msg: "add stream send: " + err.Error()})
			c.clearStream(st)
		}
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
	for {
		resp, err := st.s.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = errors.New("stream ended by bookie")
			}
			c.clearStream(st)
			st.failAll(asBookieError(c.id, err))
			return
		}
		st.mu.Lock()
		cb, ok := st.pending[resp.RequestId]
		if ok {
			delete(st.pending, resp.RequestId)
		}
		st.mu.Unlock()
		if !ok {
			continue
		}
		if resp.Code == 0 {
			cb(nil)
		} else {
			cb(&bookieError{bookie: c.id, code: codes.Code(resp.Code), msg: resp.Message})
		}
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
