package client

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
	"github.com/meridianmq/meridian/internal/grpcbuf"
	"github.com/meridianmq/meridian/security"
	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/experimental"
)

// maxGRPCMessageBytes bounds one gRPC message in either direction: the
// broker's default entry limit (5 MiB) plus framing headroom, so that an
// oversize batch reaches the broker and comes back as ErrMessageTooLarge
// with the broker's limit rather than as a transport error.
const maxGRPCMessageBytes = 16 << 20

// Client is a connection to a Meridian region, or to several regions
// with failover between them (Options.Regions). It holds one gRPC
// connection per broker, shared by every producer, consumer and lookup.
// Safe for concurrent use; Close it when done.
type Client struct {
	opts    Options
	log     *slog.Logger
	metrics *clientMetrics
	// sec gives every connection its TLS and token (plaintext without).
	sec *security.Runtime

	// mu guards the fields below.
	mu       sync.Mutex
	conns    map[string]*grpc.ClientConn // by broker address (before DialRewrite)
	regions  []*regionState              // one per region; one unnamed for a plain URL
	active   int                         // index of the region in use
	gen      uint64                      // incremented by every region switch
	switchCh chan struct{}               // closed and replaced by every region switch
	pending  *pendingSwitch              // the last switch, until a stream reconnects
	primary  string                      // the URL address that answered first (admin calls)
	owned    map[closer]struct{}         // open producers and consumers
	closed   bool
	// lastTarget is the last failover group target read (controlled).
	lastTarget *FailoverTargetStatus

	stopFailover context.CancelFunc // ends the failover loop (nil: none)
	failoverDone chan struct{}      // closed when the failover loop ends
}

// regionState is one region's broker addresses.
type regionState struct {
	name string
	// known are the broker addresses to try lookups on: the URL's first,
	// then those learned (bounded).
	known []string
}

// closer is a producer or consumer the client closes on Close.
type closer interface {
	Close(ctx context.Context) error
}

// New connects to the broker at opts.URL and returns a Client. It fails
// when the broker cannot be reached within ConnectTimeout (or ctx). With
// several regions it starts in the first one it reaches, in list order.
func New(ctx context.Context, opts Options) (*Client, error) {
	opts = opts.withDefaults()
	if err := opts.resolveRegions(); err != nil {
		return nil, err
	}
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	sec, err := opts.securityRuntime()
	if err != nil {
		return nil, err
	}
	c := &Client{
		opts:     opts,
		sec:      sec,
		log:      opts.Logger,
		conns:    map[string]*grpc.ClientConn{},
		owned:    map[closer]struct{}{},
		metrics:  newClientMetrics(opts.Registerer),
		switchCh: make(chan struct{}),
	}
	if len(opts.Regions) == 0 {
		c.regions = []*regionState{{known: splitAddrs(opts.URL)}}
	}
	for _, r := range opts.Regions {
		c.regions = append(c.regions, &regionState{name: r.Name, known: splitAddrs(r.URL)})
	}
	// Any one reachable broker is enough.
	var lastErr error
	for ri, r := range c.regions {
		for _, addr := range r.known {
			cc, err := c.conn(addr)
			if err != nil {
				_ = c.closeConns()
				_ = sec.Close()
				return nil, err
			}
			cctx, cancel := context.WithTimeout(ctx, opts.ConnectTimeout)
			err = waitReady(cctx, cc)
			cancel()
			if err == nil {
				c.primary = addr
				c.active = ri
				c.discover(ctx, ri, addr)
				if c.multiRegion() {
					c.startFailover(c.initialTarget(ctx))
				}
				return c, nil
			}
			lastErr = fmt.Errorf("%s: %v", addr, err)
			if ctx.Err() != nil {
				break
			}
		}
	}
	_ = c.closeConns()
	_ = sec.Close()
	return nil, fmt.Errorf("%w: cannot reach a broker at %s: %v", ErrUnavailable, opts.describeURL(), lastErr)
}

// multiRegion reports whether the client fails over between regions
// (false for a nil client: unit tests build bare consumers).
func (c *Client) multiRegion() bool {
	return c != nil && (len(c.regions) > 1 || len(c.regions) == 1 && c.regions[0].name != "")
}

// discover learns region ri's other brokers from addr (best effort), so
// lookups still work when the broker named by URL dies.
func (c *Client) discover(ctx context.Context, ri int, addr string) {
	cc, err := c.conn(addr)
	if err != nil {
		return
	}
	dctx, cancel := context.WithTimeout(ctx, c.opts.ConnectTimeout)
	defer cancel()
	resp, err := clientv1.NewAdminClient(cc).ListBrokers(dctx, &clientv1.ListBrokersRequest{})
	if err != nil {
		c.log.Debug("broker discovery failed", "err", err)
		return
	}
	for _, b := range resp.GetBrokers() {
		if a := b.GetGrpcAddress(); a != "" {
			c.learn(ri, a)
		}
	}
}

// waitReady blocks until cc is READY or ctx ends.
func waitReady(ctx context.Context, cc *grpc.ClientConn) error {
	cc.Connect()
	for {
		s := cc.GetState()
		if s == connectivity.Ready {
			return nil
		}
		if !cc.WaitForStateChange(ctx, s) {
			if s == connectivity.TransientFailure {
				return fmt.Errorf("connection refused or failing (%v)", ctx.Err())
			}
			return ctx.Err()
		}
	}
}

// conn returns the shared connection to addr, dialing lazily.
func (c *Client) conn(addr string) (*grpc.ClientConn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, ErrClientClosed
	}
	if cc, ok := c.conns[addr]; ok {
		return cc, nil
	}
	// The name checked against the broker's certificate is the address's
	// host, before any DialRewrite.
	dopts := append(c.sec.DialOptions(security.ServerNameOf(addr)),
		grpc.WithDefaultCallOptions(
			grpc.MaxCallRecvMsgSize(maxGRPCMessageBytes),
			grpc.MaxCallSendMsgSize(maxGRPCMessageBytes),
			grpc.ForceCodecV2(grpcbuf.Codec())),
		grpc.WithConnectParams(connectParams(c.opts)),
		// Batches of 32 KiB–1 MiB would each zero a 1 MiB buffer in
		// gRPC's default pool.
		experimental.WithBufferPool(grpcbuf.Pool()),
	)
	if kp, ok := keepaliveParams(c.opts); ok {
		dopts = append(dopts, grpc.WithKeepaliveParams(kp))
	}
	target := addr
	if c.opts.DialRewrite != nil {
		target = c.opts.DialRewrite(addr)
	}
	cc, err := grpc.NewClient(target, dopts...)
	if err != nil {
		return nil, fmt.Errorf("%w: broker address %q: %v", ErrInvalidArgument, addr, err)
	}
	c.conns[addr] = cc
	return cc, nil
}

// api returns the client-protocol stub for addr.
func (c *Client) api(addr string) (clientv1.MeridianClient, error) {
	cc, err := c.conn(addr)
	if err != nil {
		return nil, err
	}
	return clientv1.NewMeridianClient(cc), nil
}

// lookup asks a broker of the active region which broker owns topic. It
// tries the region's URL first, then every broker address learned so far,
// so that losing the broker named by URL does not stop a multi-broker
// region's clients. It returns the owner and the client's switch
// generation the answer belongs to.
func (c *Client) lookup(ctx context.Context, topic string) (string, uint64, error) {
	c.mu.Lock()
	ri, gen := c.active, c.gen
	cands := append([]string(nil), c.regions[ri].known...)
	c.mu.Unlock()
	var last error
	for _, addr := range cands {
		api, err := c.api(addr)
		if err != nil {
			return "", 0, err
		}
		lctx, cancel := context.WithTimeout(ctx, c.opts.ConnectTimeout)
		resp, err := api.Lookup(lctx, &clientv1.LookupRequest{Topic: topic})
		cancel()
		if err != nil {
			err = mapError(err)
			if !retryable(err) {
				return "", 0, err
			}
			last = err
			if ctx.Err() != nil {
				break
			}
			continue
		}
		owner := resp.GetBrokerUrl()
		if owner == "" {
			owner = addr
		}
		c.learn(ri, owner)
		c.preferForLookup(ri, addr)
		return owner, gen, nil
	}
	if ctx.Err() != nil {
		return "", 0, ctx.Err()
	}
	return "", 0, fmt.Errorf("lookup %s: %w", topic, last)
}

// learn remembers a broker address of region ri for later lookups
// (bounded list).
func (c *Client) learn(ri int, addr string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.regions[ri]
	for _, a := range r.known {
		if a == addr {
			return
		}
	}
	if len(r.known) < 64 {
		r.known = append(r.known, addr)
	}
}

// preferForLookup moves addr to the front of region ri's lookup list: the
// broker that answered last is tried first next time, so a dead (or
// blackholed) broker costs one failed attempt, not one per lookup.
func (c *Client) preferForLookup(ri int, addr string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	known := c.regions[ri].known
	for i, a := range known {
		if a == addr {
			copy(known[1:i+1], known[:i])
			known[0] = addr
			return
		}
	}
}

// noteFailure is a hook for a failed stream; lookups are never cached, so
// the next connect asks again. It logs redirects.
func (c *Client) noteFailure(topic string, err error) {
	c.log.Debug("topic connection failed", "topic", topic, "err", err)
}

func (c *Client) checkOpen() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return ErrClientClosed
	}
	return nil
}

func (c *Client) track(x closer) {
	c.mu.Lock()
	c.owned[x] = struct{}{}
	c.mu.Unlock()
}

func (c *Client) untrack(x closer) {
	c.mu.Lock()
	delete(c.owned, x)
	c.mu.Unlock()
}

// Close closes every producer and consumer of the client (bounded by ctx)
// and then the connections.
func (c *Client) Close(ctx context.Context) error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	owned := make([]closer, 0, len(c.owned))
	for x := range c.owned {
		owned = append(owned, x)
	}
	c.mu.Unlock()
	for _, x := range owned {
		_ = x.Close(ctx)
	}
	c.mu.Lock()
	c.closed = true
	stop, done := c.stopFailover, c.failoverDone
	c.mu.Unlock()
	if stop != nil {
		stop()
		<-done
	}
	err := c.closeConns()
	_ = c.sec.Close()
	return err
}

func (c *Client) closeConns() error {
	c.mu.Lock()
	conns := c.conns
	c.conns = map[string]*grpc.ClientConn{}
	c.mu.Unlock()
	var first error
	for _, cc := range conns {
		if err := cc.Close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// opTimeout derives a context bounded by OperationTimeout when ctx has no
// deadline of its own.
func (c *Client) opTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, c.opts.OperationTimeout)
}
