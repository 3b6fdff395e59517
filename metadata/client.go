package metadata

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	metadatav1 "github.com/meridianmq/meridian/api/metadata/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// ClientConfig tunes a Client.
type ClientConfig struct {
	// RequestTimeout applies to calls whose context has no deadline
	// (default 5s). Retries happen within it.
	RequestTimeout time.Duration
	// RetryBackoff is the first pause between attempts (default 20ms,
	// doubling up to 500ms).
	RetryBackoff time.Duration
	// WatchReconnectTimeout ends a watch with ErrUnavailable after this
	// long without any endpoint accepting it (default 30s).
	WatchReconnectTimeout time.Duration
	// DialOptions are added to every connection (default: plaintext).
	DialOptions []grpc.DialOption
	// Logger receives reconnect logs (default slog.Default()).
	Logger *slog.Logger
}

// DefaultClientConfig returns the client defaults.
func DefaultClientConfig() ClientConfig {
	return ClientConfig{RequestTimeout: 5 * time.Second, RetryBackoff: 20 * time.Millisecond, WatchReconnectTimeout: 30 * time.Second}
}

// Validate checks the config.
func (c *ClientConfig) Validate() error {
	switch {
	case c.RequestTimeout <= 0:
		return fmt.Errorf("%w: request_timeout %v must be positive", ErrInvalidArgument, c.RequestTimeout)
	case c.RetryBackoff <= 0:
		return fmt.Errorf("%w: retry_backoff %v must be positive", ErrInvalidArgument, c.RetryBackoff)
	case c.WatchReconnectTimeout <= 0:
		return fmt.Errorf("%w: watch_reconnect_timeout %v must be positive", ErrInvalidArgument, c.WatchReconnectTimeout)
	}
	return nil
}

// ClientOption changes a ClientConfig.
type ClientOption func(*ClientConfig)

// WithClientConfig replaces the whole client config.
func WithClientConfig(cfg ClientConfig) ClientOption { return func(c *ClientConfig) { *c = cfg } }

// WithLogger sets the client's logger.
func WithLogger(l *slog.Logger) ClientOption { return func(c *ClientConfig) { c.Logger = l } }

// WithDialOptions adds dial options to every connection (after the
// defaults, so transport credentials given here replace the plaintext
// default).
func WithDialOptions(opts ...grpc.DialOption) ClientOption {
	return func(c *ClientConfig) { c.DialOptions = append(c.DialOptions, opts...) }
}

// WithRequestTimeout sets the timeout of calls without a deadline.
func WithRequestTimeout(d time.Duration) ClientOption {
	return func(c *ClientConfig) { c.RequestTimeout = d }
}

// Client is a Store for one shard over gRPC. It talks to one endpoint at a
// time and moves to the next when that one fails.
//
// Retries: a call the server reports as not applied (unavailable: no
// leader) is retried on any endpoint. A call whose outcome is unknown (the
// connection broke after sending, the server's proposal timed out) is
// retried only if it is idempotent or version-guarded — Get, List,
// KeepAlive, and Put/Delete/Txn with a version guard; otherwise it returns
// ErrUnknownOutcome. A guarded retry that then fails its guard also returns
// ErrUnknownOutcome, since the first attempt may have applied. Watch
// reconnects and resumes after the last revision it delivered.
type Client struct {
	shard string
	cfg   ClientConfig
	log   *slog.Logger
	pool  *connPool
}

var _ Store = (*Client)(nil)

// connPool holds one connection per endpoint, shared by the Clients of
// different shards made with ForShard.
type connPool struct {
	endpoints []string
	conns     []*grpc.ClientConn
	clients   []metadatav1.MetadataClient
	// mu guards cur, the endpoint tried first.
	mu  sync.Mutex
	cur int
}

// NewClient returns a client of one shard that uses the given endpoints
// (host:port of metadata nodes hosting the shard). It does not dial: ctx is
// for future use and may be a background context.
func NewClient(ctx context.Context, endpoints []string, shard string, opts ...ClientOption) (*Client, error) {
	cfg := DefaultClientConfig()
	for _, o := range opts {
		o(&cfg)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if len(endpoints) == 0 {
		return nil, fmt.Errorf("%w: endpoints is empty", ErrInvalidArgument)
	}
	if shard == "" {
		return nil, fmt.Errorf("%w: shard is empty", ErrInvalidArgument)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	pool := &connPool{endpoints: append([]string(nil), endpoints...)}
	dial := append([]grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64 << 20)),
	}, cfg.DialOptions...)
	for i, ep := range endpoints {
		if ep == "" {
			pool.close()
			return nil, fmt.Errorf("%w: endpoints[%d] is empty", ErrInvalidArgument, i)
		}
		cc, err := grpc.NewClient(ep, dial...)
		if err != nil {
			pool.close()
			return nil, fmt.Errorf("%w: endpoints[%d] %q: %v", ErrInvalidArgument, i, ep, err)
		}
		pool.conns = append(pool.conns, cc)
		pool.clients = append(pool.clients, metadatav1.NewMetadataClient(cc))
	}
	return &Client{shard: shard, cfg: cfg, log: log.With("component", "metadata-client", "shard", shard), pool: pool}, nil
}

// ForShard returns a client of another shard sharing this client's
// connections. Closing any of them closes the connections.
func (c *Client) ForShard(shard string) *Client {
	cp := *c
	cp.shard = shard
	cp.log = c.log.With("shard", shard)
	return &cp
}

// Close closes the connections.
func (c *Client) Close() error { return c.pool.close() }

func (p *connPool) close() error {
	var errs []error
	for _, cc := range p.conns {
		errs = append(errs, cc.Close())
	}
	return errors.Join(errs...)
}

func (p *connPool) pick() (int, metadatav1.MetadataClient) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cur, p.clients[p.cur]
}

// next moves to the endpoint after i (unless another call already moved).
func (p *connPool) next(i int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cur == i {
		p.cur = (i + 1) % len(p.clients)
	}
}

// outcome classifies one attempt's error.
type outcome int

const (
	final       outcome = iota // the server decided: return it
	notApplied                 // safe to retry anything
	maybeSent                  // may have been applied
	ctxDone                    // the caller's context ended
	wrongServer                // the endpoint does not serve this shard
)

func classify(ctx context.Context, err error) (outcome, error) {
	if ctx.Err() != nil {
		return ctxDone, ctx.Err()
	}
	mapped := FromStatus(err)
	var remote *remoteError
	if errors.As(mapped, &remote) {
		switch {
		case errors.Is(mapped, ErrUnavailable):
			return notApplied, mapped
		case errors.Is(mapped, ErrUnknownOutcome):
			return maybeSent, mapped
		case errors.Is(mapped, ErrInvalidArgument) && strings.Contains(mapped.Error(), "is not hosted here"):
			return wrongServer, mapped
		}
		return final, mapped
	}
	st, _ := status.FromError(err)
	switch st.Code() {
	case codes.Unavailable:
		// A dial failure means nothing was sent.
		if m := st.Message(); strings.Contains(m, "while dialing") || strings.Contains(m, "connection refused") {
			return notApplied, err
		}
		return maybeSent, err
	case codes.DeadlineExceeded, codes.Canceled:
		return maybeSent, err
	case codes.Unimplemented, codes.ResourceExhausted:
		return notApplied, err
	}
	return final, err
}

// call runs one RPC with retries. safe says whether an attempt with an
// unknown outcome may be repeated; write says whether the call changes state
// (so a lost answer is ErrUnknownOutcome rather than ErrUnavailable).
func (c *Client) call(ctx context.Context, safe, write bool, rpc func(context.Context, metadatav1.MetadataClient) error) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.cfg.RequestTimeout)
		defer cancel()
	}
	backoff := c.cfg.RetryBackoff
	uncertain := false
	wrong := 0
	var last error
	for {
		if ctx.Err() != nil {
			if write && uncertain {
				return fmt.Errorf("%w: %w (last error: %v)", ErrUnknownOutcome, ctx.Err(), last)
			}
			return fmt.Errorf("%w: %w (last error: %v)", ErrUnavailable, ctx.Err(), last)
		}
		i, mc := c.pool.pick()
		err := rpc(ctx, mc)
		if err == nil {
			return nil
		}
		kind, mapped := classify(ctx, err)
		switch kind {
		case final:
			if uncertain && (errors.Is(mapped, ErrVersionMismatch) || errors.Is(mapped, ErrNotFound) || errors.Is(mapped, ErrSessionExpired)) {
				return fmt.Errorf("%w: an earlier attempt may have applied (%v), then: %v", ErrUnknownOutcome, last, mapped)
			}
			return mapped
		case ctxDone:
			if write {
				// The attempt was in flight when the context ended.
				return fmt.Errorf("%w: %w", ErrUnknownOutcome, mapped)
			}
			return fmt.Errorf("%w: %w", ErrUnavailable, mapped)
		case wrongServer:
			wrong++
			if wrong >= len(c.pool.clients) {
				return mapped
			}
		case maybeSent:
			if write && !safe {
				if errors.Is(mapped, ErrUnknownOutcome) {
					return mapped
				}
				return fmt.Errorf("%w: %v", ErrUnknownOutcome, mapped)
			}
			if write {
				uncertain = true
			}
		case notApplied:
		}
		last = mapped
		c.pool.next(i)
		c.log.Debug("metadata call retry", "endpoint", c.pool.endpoints[i], "err", mapped)
		if wait(ctx, backoff) {
			backoff = min(backoff*2, 500*time.Millisecond)
		}
	}
}

// guarded reports whether a write can never apply twice: some put or
// delete has an exact version or must-not-exist guard.
func guarded(ops []Op) bool {
	for _, op := range ops {
		if (op.Type == OpPut && op.ExpectedVersion != AnyVersion) || (op.Type == OpDelete && op.ExpectedVersion > 0) {
			return true
		}
	}
	return false
}

// Get implements Store.
func (c *Client) Get(ctx context.Context, key string, opts ReadOptions) (KV, error) {
	var out KV
	err := c.call(ctx, true, false, func(ctx context.Context, mc metadatav1.MetadataClient) error {
		r, err := mc.Get(ctx, &metadatav1.GetRequest{Shard: c.shard, Key: key, Stale: opts.Stale})
		if err == nil {
			out = kvFromPB(r.Kv)
		}
		return err
	})
	return out, err
}

// Put implements Store.
func (c *Client) Put(ctx context.Context, key string, value []byte, expectedVersion int64, session SessionID) (KV, error) {
	var out KV
	safe := guarded([]Op{{Type: OpPut, ExpectedVersion: expectedVersion}})
	err := c.call(ctx, safe, true, func(ctx context.Context, mc metadatav1.MetadataClient) error {
		r, err := mc.Put(ctx, &metadatav1.PutRequest{Shard: c.shard, Key: key, Value: value, ExpectedVersion: expectedVersion, Session: uint64(session)})
		if err == nil {
			out = kvFromPB(r.Kv)
		}
		return err
	})
	return out, err
}

// Delete implements Store.
func (c *Client) Delete(ctx context.Context, key string, expectedVersion int64) error {
	safe := guarded([]Op{{Type: OpDelete, ExpectedVersion: expectedVersion}})
	return c.call(ctx, safe, true, func(ctx context.Context, mc metadatav1.MetadataClient) error {
		_, err := mc.Delete(ctx, &metadatav1.DeleteRequest{Shard: c.shard, Key: key, ExpectedVersion: expectedVersion})
		return err
	})
}

// List implements Store.
func (c *Client) List(ctx context.Context, prefix string, page Page, opts ReadOptions) (ListResult, error) {
	var out ListResult
	if page.Limit < 0 || page.Limit > MaxPageLimit {
		return out, fmt.Errorf("%w: page.limit %d must be in [0, %d]", ErrInvalidArgument, page.Limit, MaxPageLimit)
	}
	err := c.call(ctx, true, false, func(ctx context.Context, mc metadatav1.MetadataClient) error {
		r, err := mc.List(ctx, &metadatav1.ListRequest{Shard: c.shard, Prefix: prefix, After: page.After, Limit: int32(page.Limit), Stale: opts.Stale})
		if err != nil {
			return err
		}
		out = ListResult{More: r.More, Revision: r.Revision, KVs: make([]KV, 0, len(r.Kvs))}
		for _, kv := range r.Kvs {
			out.KVs = append(out.KVs, kvFromPB(kv))
		}
		return nil
	})
	return out, err
}

// Txn implements Store.
func (c *Client) Txn(ctx context.Context, ops []Op) ([]KV, error) {
	req := &metadatav1.TxnRequest{Shard: c.shard}
	for _, op := range ops {
		req.Ops = append(req.Ops, &metadatav1.Op{Type: metadatav1.OpType(op.Type), Key: op.Key, Value: op.Value,
			ExpectedVersion: op.ExpectedVersion, Session: uint64(op.Session)})
	}
	var out []KV
	err := c.call(ctx, guarded(ops), true, func(ctx context.Context, mc metadatav1.MetadataClient) error {
		r, err := mc.Txn(ctx, req)
		if err != nil {
			return err
		}
		out = make([]KV, 0, len(r.Kvs))
		for _, kv := range r.Kvs {
			out = append(out, kvFromPB(kv))
		}
		return nil
	})
	return out, err
}

// CreateSession implements Store. It is not retried after an unknown
// outcome: a retry could open a second session.
func (c *Client) CreateSession(ctx context.Context, ttl time.Duration) (SessionID, error) {
	var out SessionID
	err := c.call(ctx, false, true, func(ctx context.Context, mc metadatav1.MetadataClient) error {
		r, err := mc.CreateSession(ctx, &metadatav1.CreateSessionRequest{Shard: c.shard, TtlMs: ttl.Milliseconds()})
		if err == nil {
			out = SessionID(r.Session)
		}
		return err
	})
	return out, err
}

// KeepAlive implements Store; it is idempotent and retried.
func (c *Client) KeepAlive(ctx context.Context, id SessionID) error {
	return c.call(ctx, true, false, func(ctx context.Context, mc metadatav1.MetadataClient) error {
		_, err := mc.KeepAlive(ctx, &metadatav1.KeepAliveRequest{Shard: c.shard, Session: uint64(id)})
		return err
	})
}

// CloseSession implements Store.
func (c *Client) CloseSession(ctx context.Context, id SessionID) error {
	return c.call(ctx, false, true, func(ctx context.Context, mc metadatav1.MetadataClient) error {
		_, err := mc.CloseSession(ctx, &metadatav1.CloseSessionRequest{Shard: c.shard, Session: uint64(id)})
		return err
	})
}

// Watch implements Store. After a broken stream it reconnects (to the next
// endpoint) and asks for changes after the last revision it delivered, so
// nothing is skipped or repeated.
func (c *Client) Watch(ctx context.Context, prefix string, afterRevision int64) (<-chan Event, <-chan error) {
	evc := make(chan Event, 64)
	errc := make(chan error, 1)
	go func() {
		err := c.watch(ctx, prefix, afterRevision, evc)
		close(evc)
		errc <- err
		close(errc)
	}()
	return evc, errc
}

func (c *Client) watch(ctx context.Context, prefix string, last int64, evc chan<- Event) error {
	backoff := c.cfg.RetryBackoff
	failingSince := time.Time{}
	for {
		i, mc := c.pool.pick()
		sctx, cancel := context.WithCancel(ctx)
		stream, err := mc.Watch(sctx, &metadatav1.WatchRequest{Shard: c.shard, Prefix: prefix, AfterRevision: last})
		if err == nil {
			for {
				resp, rerr := stream.Recv()
				if rerr != nil {
					err = rerr
					break
				}
				failingSince = time.Time{}
				backoff = c.cfg.RetryBackoff
				for _, pe := range resp.Events {
					ev := eventFromPB(pe)
					if ev.Revision <= last {
						continue // never deliver twice
					}
					select {
					case evc <- ev:
						last = ev.Revision
					case <-ctx.Done():
						cancel()
						return nil
					}
				}
			}
		}
		cancel()
		if ctx.Err() != nil {
			return nil
		}
		kind, mapped := classify(ctx, err)
		var remote *remoteError
		if kind == final && errors.As(mapped, &remote) {
			return mapped // compacted, invalid argument: reconnecting will not help
		}
		if failingSince.IsZero() {
			failingSince = time.Now()
		} else if time.Since(failingSince) > c.cfg.WatchReconnectTimeout {
			return fmt.Errorf("%w: watch could not reconnect for %v: %v", ErrUnavailable, c.cfg.WatchReconnectTimeout, mapped)
		}
		c.log.Debug("watch reconnect", "endpoint", c.pool.endpoints[i], "after", last, "err", mapped)
		c.pool.next(i)
		if !wait(ctx, backoff) {
			return nil
		}
		backoff = min(backoff*2, 500*time.Millisecond)
	}
}
