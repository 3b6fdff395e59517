package replicator

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
	"github.com/meridianmq/meridian/security"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"
)

// Conn is an open replication stream (after `opened`). Send and Recv may
// be called concurrently with each other (one goroutine each); the stream
// ends when the context given to the Connector ends.
type Conn interface {
	Send(*clientv1.ReplicateRequest) error
	Recv() (*clientv1.ReplicateResponse, error)
}

// Connector opens a replication stream for one topic to the remote
// region's owner of the topic. The stream lives until ctx ends.
type Connector func(ctx context.Context) (Conn, *clientv1.ReplicateOpened, error)

// Pool shares gRPC connections to remote brokers among the replicators of
// one broker. Connections use a keepalive (a dead TCP connection is closed
// within about 11 s; sessions notice a cut sooner by their acknowledgement
// timeout) and a reconnect backoff capped at one second, so that
// replication resumes quickly after a heal.
type Pool struct {
	// DialAddr maps an advertised address to the address to dial (the
	// broker's dial rewrite); nil dials addresses as they are.
	DialAddr func(string) string
	// Keepalive is the ping interval and timeout (default 10 s and 1 s;
	// gRPC does not ping more often than every 10 s: the replicator's own
	// acknowledgement timeout notices a cut link sooner).
	Keepalive time.Duration
	// MaxMessageBytes bounds a received message (default 8 MiB).
	MaxMessageBytes int
	// Security gives the transport credentials and token of every dial
	// (nil: plaintext). The server name checked is the advertised
	// address's host, not the rewritten one.
	Security *security.Runtime

	// mu guards conns.
	mu    sync.Mutex
	conns map[string]*grpc.ClientConn
}

// Get returns the shared connection to addr (an advertised address).
func (p *Pool) Get(addr string) (*grpc.ClientConn, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if c, ok := p.conns[addr]; ok {
		return c, nil
	}
	target := addr
	if p.DialAddr != nil {
		target = p.DialAddr(addr)
	}
	// gRPC raises a client keepalive below 10 s to 10 s (with a warning).
	ka := max(p.Keepalive, 10*time.Second)
	maxMsg := p.MaxMessageBytes
	if maxMsg <= 0 {
		maxMsg = 8 << 20
	}
	c, err := grpc.NewClient(target, append(p.Security.DialOptions(security.ServerNameOf(addr)),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: ka, Timeout: time.Second, PermitWithoutStream: false}),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
			MinConnectTimeout: 2 * time.Second,
		}),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMsg), grpc.MaxCallSendMsgSize(maxMsg)))...)
	if err != nil {
		return nil, fmt.Errorf("replicator: dial %s: %w", target, err)
	}
	if p.conns == nil {
		p.conns = map[string]*grpc.ClientConn{}
	}
	p.conns[addr] = c
	return c, nil
}

// Close closes every connection.
func (p *Pool) Close() {
	p.mu.Lock()
	conns := p.conns
	p.conns = nil
	p.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
}

// Dialer finds the owner of a topic in a remote region and opens a
// replication stream to it.
type Dialer struct {
	Pool *Pool
	// Topic, Source and Target name the stream (see ReplicateOpen).
	Topic, Source, Target string
	// Endpoints returns the remote region's brokers (any of them answers a
	// Lookup, forwarding it to the owner).
	Endpoints func(ctx context.Context) ([]string, error)
	// Timeout bounds one lookup or open (default 3 s).
	Timeout time.Duration
}

// maxRedirects bounds the TOPIC_NOT_OWNED redirects one Connect follows.
const maxRedirects = 4

// Opener opens a stream on the connection cc to the broker believed to
// own the topic, within timeout for its first answer. An error carrying
// TOPIC_NOT_OWNED with a redirect URL makes Dial try the broker named.
// The stream must live until the ctx given to Dial ends.
type Opener func(ctx context.Context, cc grpc.ClientConnInterface, timeout time.Duration) error

// Dial finds the owner of the topic in the remote region (a Lookup through
// any of its endpoints, then following up to maxRedirects redirects) and
// runs open there. Both the Replicate stream (Connect) and the
// replicated-subscription stream use it, so they share the lookup,
// redirect and connection pooling.
func (d *Dialer) Dial(ctx context.Context, open Opener) error {
	timeout := d.Timeout
	if timeout <= 0 {
		timeout = 3 * time.Second
	}
	eps, err := d.Endpoints(ctx)
	if err != nil {
		return fmt.Errorf("replicator: endpoints of region %s: %w", d.Target, err)
	}
	if len(eps) == 0 {
		return fmt.Errorf("replicator: region %s has no registered broker", d.Target)
	}
	var errs []error
	for _, ep := range eps {
		owner, err := d.lookup(ctx, ep, timeout)
		if err != nil {
			errs = append(errs, fmt.Errorf("lookup via %s: %w", ep, err))
			continue
		}
		for range maxRedirects {
			c, err := d.Pool.Get(owner)
			if err == nil {
				err = open(ctx, c, timeout)
			}
			if err == nil {
				return nil
			}
			redirect := redirectOf(err)
			if redirect == "" || redirect == owner {
				errs = append(errs, fmt.Errorf("open at %s: %w", owner, err))
				break
			}
			owner = redirect
		}
		if ctx.Err() != nil {
			break
		}
	}
	return fmt.Errorf("replicator: connect to region %s for %s: %w", d.Target, d.Topic, errors.Join(errs...))
}

// Connect implements Connector.
func (d *Dialer) Connect(ctx context.Context) (Conn, *clientv1.ReplicateOpened, error) {
	var conn Conn
	var opened *clientv1.ReplicateOpened
	err := d.Dial(ctx, func(ctx context.Context, cc grpc.ClientConnInterface, timeout time.Duration) error {
		var err error
		conn, opened, err = d.open(ctx, cc, timeout)
		return err
	})
	if err != nil {
		return nil, nil, err
	}
	return conn, opened, nil
}

func (d *Dialer) lookup(ctx context.Context, ep string, timeout time.Duration) (string, error) {
	c, err := d.Pool.Get(ep)
	if err != nil {
		return "", err
	}
	lctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	resp, err := clientv1.NewMeridianClient(c).Lookup(lctx, &clientv1.LookupRequest{Topic: d.Topic})
	if err != nil {
		return "", err
	}
	if resp.GetBrokerUrl() == "" {
		return "", errors.New("lookup answered no owner")
	}
	return resp.GetBrokerUrl(), nil
}

// open starts the Replicate stream on cc.
func (d *Dialer) open(ctx context.Context, cc grpc.ClientConnInterface, timeout time.Duration) (Conn, *clientv1.ReplicateOpened, error) {
	st, err := clientv1.NewReplicationClient(cc).Replicate(ctx)
	if err != nil {
		return nil, nil, err
	}
	if err := st.Send(&clientv1.ReplicateRequest{Kind: &clientv1.ReplicateRequest_Open{Open: &clientv1.ReplicateOpen{
		Topic: d.Topic, SourceRegion: d.Source, TargetRegion: d.Target}}}); err != nil {
		return nil, nil, err
	}
	r, err := RecvWithin(ctx, timeout, st.Recv)
	if err != nil {
		return nil, nil, err
	}
	opened := r.GetOpened()
	if opened == nil {
		return nil, nil, fmt.Errorf("%w: first answer is not opened", ErrProtocol)
	}
	return st, opened, nil
}

// RecvWithin waits for a stream's first answer: it must come within
// timeout; a stream that never answers (a link cut after the dial) is
// abandoned to the caller's ctx, which ends it.
func RecvWithin[T any](ctx context.Context, timeout time.Duration, recv func() (T, error)) (T, error) {
	type first struct {
		r   T
		err error
	}
	ch := make(chan first, 1)
	go func() {
		r, err := recv()
		ch <- first{r, err}
	}()
	var zero T
	select {
	case f := <-ch:
		return f.r, f.err
	case <-time.After(timeout):
		return zero, fmt.Errorf("no answer to open within %v", timeout)
	case <-ctx.Done():
		return zero, ctx.Err()
	}
}

// redirectOf returns the owner named by a TOPIC_NOT_OWNED status.
func redirectOf(err error) string {
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.FailedPrecondition {
		return ""
	}
	for _, det := range st.Details() {
		if e, ok := det.(*clientv1.Error); ok && e.GetCode() == clientv1.ErrorCode_ERROR_CODE_TOPIC_NOT_OWNED {
			return e.GetRedirectUrl()
		}
	}
	return ""
}
