package replicator

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
	"golang.org/x/time/rate"
)

// Source is the local topic as a replicator sees it: its log read through
// the replicator's durable cursor. Every method may be called from several
// goroutines.
type Source interface {
	// ReadAfter returns up to max consecutive stored entries after p in log
	// order (possibly fewer, e.g. up to the end of a ledger; none when p is
	// the last stored entry). p may be a position before the first retained
	// entry. On a storage error it may return the readable entries before
	// the failed one together with the error. The returned entries belong
	// to the caller.
	ReadAfter(ctx context.Context, p Position, max int) ([]Entry, error)
	// MarkDelete moves the durable cursor forward to p (never back). It is
	// persisted later (the topic's cursor persistence): after a crash the
	// cursor may be behind, and entries are resent (the remote answers
	// DUPLICATE).
	MarkDelete(p Position) error
	// MarkDeleted returns the cursor's position.
	MarkDeleted() Position
	// Backlog returns the entries after the cursor and an estimate of their
	// bytes.
	Backlog() (entries, bytes int64)
	// Appended is signalled (capacity 1, never closed) after entries are
	// stored.
	Appended() <-chan struct{}
}

// Config configures one replicator.
type Config struct {
	// Self is the local region, Remote the region replicated to, Topic the
	// topic (for logs).
	Self, Remote, Topic string
	Source              Source
	Connect             Connector
	Limits              Limits
	// ReadBatch bounds the entries of one cursor read (default 256).
	ReadBatch int
	// StallTimeout: a replicator with backlog and no progress for this long
	// is reported stalled and restarts its session (default 30 s).
	StallTimeout time.Duration
	// MaxBackoff caps the wait between sessions (default 1 s), so that
	// replication resumes within about two seconds of a link heal.
	MaxBackoff time.Duration
	// AckTimeout ends a session when requests sent on it get no
	// acknowledgement for this long (default 5 s, at least 4 round trips):
	// gRPC keepalive cannot ping more often than every 10 s, and a cut link
	// stalls bytes rather than failing them. An idle session sends an empty
	// request every IdleProbe (default 1 s) so that a cut is noticed even
	// with nothing to send.
	AckTimeout time.Duration
	IdleProbe  time.Duration
	// Rates returns the current rate limits (messages/s, bytes/s; 0 =
	// unlimited); nil = unlimited. Polled about once a second.
	Rates func() (msgs, bytes int64)
	// Metrics (may be nil) counts shipped entries, reconnects and stalls.
	Metrics *Metrics
	Logger  *slog.Logger
}

// Status is a replicator's state for stats.
type Status struct {
	Remote    string
	Connected bool
	// BacklogEntries and BacklogBytes are after the cursor (bytes
	// estimated).
	BacklogEntries, BacklogBytes int64
	// LagSeconds is the age of the oldest entry not yet replicated (0 with
	// no backlog).
	LagSeconds float64
	// MsgRateOut and ByteRateOut are entries' messages and bytes persisted
	// by the remote per second (last interval).
	MsgRateOut, ByteRateOut float64
	// SentEntries counts entries the remote persisted since this replicator
	// started.
	SentEntries int64
	Reconnects  int64
	Stalled     bool
	// LastError is the error that ended the last session, until the
	// replicator makes progress again.
	LastError string
	// Window is the byte window in flight, RTT the lowest recent round trip.
	Window int64
	RTT    time.Duration
	// Progress is the share of the retained log the cursor has passed
	// (backfill progress, 0..1).
	Progress float64
	// HeldBytes is the memory held by relayed entries waiting for their
	// origin's own stream (at most Limits.MaxHeldBytes); RelayedEarly
	// counts, this session, the waiting entries relayed because they waited
	// Limits.MaxRelayWait or passed Limits.MaxHeldBytes (their origin
	// connected but slow).
	HeldBytes    int64
	RelayedEarly int64
}

// Replicator ships one topic to one remote region. Start it once; Stop
// ends it.
type Replicator struct {
	cfg Config
	log *slog.Logger

	msgLim, byteLim *rate.Limiter

	cancel context.CancelFunc
	done   chan struct{}

	// mu guards the fields below.
	mu            sync.Mutex
	status        Status
	sessionCancel context.CancelFunc
	lastProgress  time.Time
	oldestMs      int64 // publish time of the oldest entry not done (0: unknown)
	peek          struct {
		md Position
		ms int64
		ok bool
	}
	sentMsgs, sentBytes int64
	rateAt              time.Time
	rateBase            [2]int64
}

// New validates cfg and builds a replicator.
func New(cfg Config) (*Replicator, error) {
	switch {
	case cfg.Self == "" || cfg.Remote == "":
		return nil, errors.New("replicator: Self and Remote regions must be set")
	case cfg.Self == cfg.Remote:
		return nil, fmt.Errorf("replicator: remote region %q is the local region", cfg.Remote)
	case cfg.Source == nil || cfg.Connect == nil:
		return nil, errors.New("replicator: Source and Connect must be set")
	}
	if cfg.ReadBatch <= 0 {
		cfg.ReadBatch = 256
	}
	if cfg.StallTimeout <= 0 {
		cfg.StallTimeout = 30 * time.Second
	}
	if cfg.MaxBackoff <= 0 {
		cfg.MaxBackoff = time.Second
	}
	if cfg.AckTimeout <= 0 {
		cfg.AckTimeout = 5 * time.Second
	}
	if cfg.IdleProbe <= 0 {
		cfg.IdleProbe = time.Second
	}
	cfg.Limits = cfg.Limits.withDefaults()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	r := &Replicator{cfg: cfg, log: cfg.Logger.With("topic", cfg.Topic, "remote", cfg.Remote),
		msgLim: rate.NewLimiter(rate.Inf, 1), byteLim: rate.NewLimiter(rate.Inf, 1), done: make(chan struct{})}
	r.status.Remote = cfg.Remote
	return r, nil
}

// Start runs the replicator until Stop.
func (r *Replicator) Start() {
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	now := time.Now()
	r.mu.Lock()
	r.lastProgress, r.rateAt = now, now
	r.mu.Unlock()
	go r.run(ctx)
}

// Stop ends the replicator and waits for it. The cursor keeps what was
// acknowledged; entries in flight are resent by the next owner.
func (r *Replicator) Stop() {
	if r.cancel == nil {
		return
	}
	r.cancel()
	<-r.done
}

// Remote returns the remote region.
func (r *Replicator) Remote() string { return r.cfg.Remote }

// Status returns the current state.
func (r *Replicator) Status() Status {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.status
}

// Restart ends the current session; the next one starts from the cursor.
func (r *Replicator) Restart() {
	r.mu.Lock()
	c := r.sessionCancel
	r.mu.Unlock()
	if c != nil {
		c()
	}
}

func (r *Replicator) run(ctx context.Context) {
	defer close(r.done)
	monDone := make(chan struct{})
	go func() {
		defer close(monDone)
		r.monitor(ctx)
	}()
	defer func() { <-monDone }()
	const minBackoff = 100 * time.Millisecond
	backoff := minBackoff
	for {
		sctx, cancel := context.WithCancel(ctx)
		r.mu.Lock()
		r.sessionCancel = cancel
		r.mu.Unlock()
		progressed, err := r.session(sctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		r.mu.Lock()
		r.status.Connected = false
		if err != nil && !errors.Is(err, context.Canceled) {
			r.status.LastError = err.Error()
		}
		r.status.Reconnects++
		r.mu.Unlock()
		r.cfg.Metrics.reconnect(r.cfg.Remote)
		if err != nil && !errors.Is(err, context.Canceled) {
			r.log.Debug("replication session ended", "err", err, "backoff", backoff)
		}
		if progressed {
			backoff = minBackoff
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, r.cfg.MaxBackoff)
	}
}

// session runs one replication stream until it fails or ctx ends.
// progressed reports whether the cursor moved.
func (r *Replicator) session(ctx context.Context) (progressed bool, err error) {
	conn, opened, err := r.cfg.Connect(ctx)
	if err != nil {
		return false, err
	}
	p := newPipeline(r.cfg.Self, r.cfg.Remote, r.cfg.Limits, r.cfg.Source.MarkDeleted(), opened)
	r.mu.Lock()
	r.status.Connected = true
	r.mu.Unlock()
	r.log.Debug("replication session opened", "applied", opened.GetApplied(), "direct", opened.GetDirect())

	sendCh := make(chan *request, p.lim.MaxRequests)
	ackCh := make(chan *clientv1.ReplicateAck, p.lim.MaxRequests+1)
	errCh := make(chan error, 2)
	// written counts the requests written to the stream (rate limits may
	// hold requests back before that); acked those acknowledged.
	var written atomic.Int64
	var acked int64
	var waitingSince time.Time // requests written and unacknowledged since then
	lastActive := time.Now()
	go r.sendLoop(ctx, conn, sendCh, errCh, &written)
	go func() {
		for {
			resp, err := conn.Recv()
			if err != nil {
				errCh <- fmt.Errorf("replication stream: %w", err)
				return
			}
			a := resp.GetAck()
			if a == nil {
				errCh <- fmt.Errorf("%w: unexpected %T after opened", ErrProtocol, resp.GetKind())
				return
			}
			select {
			case ackCh <- a:
			case <-ctx.Done():
				return
			}
		}
	}()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		more, err := r.fill(ctx, p, sendCh)
		if adv := r.advance(p); adv {
			progressed = true
		}
		if err != nil {
			return progressed, err
		}
		var wait <-chan time.Time
		if more {
			wait = time.After(0)
		}
		select {
		case <-ctx.Done():
			return progressed, ctx.Err()
		case <-r.cfg.Source.Appended():
		case a := <-ackCh:
			now := time.Now()
			acked++
			waitingSince, lastActive = time.Time{}, now
			pr, err := p.ack(a, now)
			r.account(pr)
			if err != nil {
				if r.advance(p) {
					progressed = true
				}
				if errors.Is(err, ErrRejected) {
					r.log.Info("remote rejected entries; rewinding to the first rejected entry", "err", err)
				}
				return progressed, err
			}
		case err := <-errCh:
			return progressed, err
		case <-tick.C:
			now := time.Now()
			if written.Load() > acked {
				if waitingSince.IsZero() {
					waitingSince = now
				}
				if d := now.Sub(waitingSince); d > max(r.cfg.AckTimeout, 4*p.win.RTT()) {
					return progressed, fmt.Errorf("no acknowledgement from region %s for %v: link down?", r.cfg.Remote, d.Round(time.Millisecond))
				}
			}
			if req := p.probe(now, now.Sub(lastActive) >= r.cfg.IdleProbe); req != nil {
				lastActive = now
				sendCh <- req // never blocks: nothing else is in flight
			}
		case <-wait:
		}
	}
}

// fill reads from the cursor and sends requests while the window has room.
// more reports that it stopped with work left (to be continued after
// looking at acknowledgements).
func (r *Replicator) fill(ctx context.Context, p *pipeline, sendCh chan<- *request) (more bool, err error) {
	for range 64 {
		for _, it := range p.missingData() {
			es, rerr := r.cfg.Source.ReadAfter(ctx, it.prev, 1)
			if rerr != nil || len(es) != 1 || es[0].Pos != it.e.Pos {
				return false, fmt.Errorf("read again entry %s after %s: got %d entries: %v", it.e.Pos, it.prev, len(es), rerr)
			}
			p.setData(it, es[0].Data)
		}
		read := false
		if p.wantRead() {
			es, rerr := r.cfg.Source.ReadAfter(ctx, p.readPos, r.cfg.ReadBatch)
			if len(es) > 0 {
				p.push(es)
				read = true
			}
			if rerr != nil && !read {
				return false, fmt.Errorf("read after %s: %w", p.readPos, rerr)
			}
		}
		req := p.next(time.Now())
		if req != nil {
			// Never blocks: the channel holds MaxRequests and at most
			// MaxRequests are in flight.
			sendCh <- req
		}
		if req == nil && !read && (len(p.missingData()) == 0 || !p.canSend()) {
			return false, nil
		}
	}
	return true, nil
}

// advance moves the cursor over the done prefix.
func (r *Replicator) advance(p *pipeline) bool {
	at, ok := p.advance()
	oldest, has := p.oldest()
	r.mu.Lock()
	if has {
		r.oldestMs = oldest
	} else {
		r.oldestMs = 0
	}
	if ok {
		r.lastProgress = time.Now()
		if r.status.Stalled {
			r.log.Info("replicator progressing again")
		}
		r.status.Stalled = false
		// The error stays visible until the replicator moves again.
		r.status.LastError = ""
	}
	r.status.Window, r.status.RTT = p.win.size, p.win.RTT()
	r.status.HeldBytes, r.status.RelayedEarly = p.heldBytes, p.relayedByTime+p.relayedByBytes
	r.mu.Unlock()
	if !ok {
		return false
	}
	if err := r.cfg.Source.MarkDelete(at); err != nil {
		r.log.Warn("move replicator cursor", "to", at, "err", err)
	}
	return true
}

func (r *Replicator) account(pr Progress) {
	if pr.Persisted == 0 {
		return
	}
	r.mu.Lock()
	r.status.SentEntries += int64(pr.Persisted)
	r.sentMsgs += int64(pr.PersistedMsgs)
	r.sentBytes += pr.PersistedBytes
	r.mu.Unlock()
	r.cfg.Metrics.sent(r.cfg.Remote, pr.Persisted, pr.PersistedBytes)
}

// sendLoop writes requests to the stream, paced by the rate limits.
func (r *Replicator) sendLoop(ctx context.Context, conn Conn, sendCh <-chan *request, errCh chan<- error, written *atomic.Int64) {
	for {
		select {
		case <-ctx.Done():
			return
		case req := <-sendCh:
			if err := waitN(ctx, r.msgLim, req.msgs); err != nil {
				return
			}
			if err := waitN(ctx, r.byteLim, int(req.bytes)); err != nil {
				return
			}
			if err := conn.Send(req.toProto()); err != nil {
				errCh <- fmt.Errorf("replication stream send: %w", err)
				return
			}
			written.Add(1)
		}
	}
}

// waitN waits for n tokens, a burst at a time (a request larger than the
// burst waits for as many bursts as it needs).
func waitN(ctx context.Context, l *rate.Limiter, n int) error {
	for n > 0 {
		if l.Limit() == rate.Inf {
			return nil
		}
		k := min(n, l.Burst())
		if err := l.WaitN(ctx, k); err != nil {
			return err
		}
		n -= k
	}
	return nil
}

// setRates applies rate limits (0 = unlimited). The burst is one second's
// worth, at least one large request.
func (r *Replicator) setRates(msgs, bytes int64) {
	apply := func(l *rate.Limiter, v int64, minBurst int) {
		if v <= 0 {
			l.SetLimit(rate.Inf)
			return
		}
		l.SetLimit(rate.Limit(v))
		l.SetBurst(int(min(max(v, int64(minBurst)), math.MaxInt32)))
	}
	apply(r.msgLim, msgs, 1)
	apply(r.byteLim, bytes, int(r.cfg.Limits.RequestBytes))
}

// monitor refreshes backlog, lag and rates, applies rate limits and
// detects stalls.
func (r *Replicator) monitor(ctx context.Context) {
	interval := min(500*time.Millisecond, r.cfg.StallTimeout/4)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	lastRates := time.Time{}
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		now := time.Now()
		if r.cfg.Rates != nil && now.Sub(lastRates) >= time.Second {
			r.setRates(r.cfg.Rates())
			lastRates = now
		}
		entries, bytes := r.cfg.Source.Backlog()
		md := r.cfg.Source.MarkDeleted()
		r.mu.Lock()
		oldest := r.oldestMs
		peek := r.peek
		r.mu.Unlock()
		if entries > 0 && oldest == 0 {
			// No session holds the entry after the cursor: read it.
			if !peek.ok || peek.md != md {
				rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				es, _ := r.cfg.Source.ReadAfter(rctx, md, 1)
				cancel()
				if len(es) > 0 {
					peek.md, peek.ms, peek.ok = md, es[0].PublishMs, true
				}
			}
			if peek.ok && peek.md == md {
				oldest = peek.ms
			}
		}
		r.mu.Lock()
		r.peek = peek
		r.status.BacklogEntries, r.status.BacklogBytes = entries, bytes
		r.status.LagSeconds = 0
		if entries > 0 && oldest > 0 {
			r.status.LagSeconds = max(0, float64(now.UnixMilli()-oldest)/1000)
		}
		if d := now.Sub(r.rateAt).Seconds(); d >= 1 {
			r.status.MsgRateOut = float64(r.sentMsgs-r.rateBase[0]) / d
			r.status.ByteRateOut = float64(r.sentBytes-r.rateBase[1]) / d
			r.rateBase = [2]int64{r.sentMsgs, r.sentBytes}
			r.rateAt = now
		}
		stall := entries > 0 && now.Sub(r.lastProgress) >= r.cfg.StallTimeout
		var cancel context.CancelFunc
		if stall {
			r.status.Stalled = true
			r.lastProgress = now // restart again only after another timeout
			cancel = r.sessionCancel
		} else if entries == 0 {
			r.lastProgress = now
			r.status.Stalled = false
		}
		lastErr := r.status.LastError
		r.mu.Unlock()
		if stall {
			r.log.Warn("replicator stalled: backlog without progress; restarting it",
				"backlog_entries", entries, "timeout", r.cfg.StallTimeout, "last_error", lastErr)
			r.cfg.Metrics.stall(r.cfg.Remote)
			if cancel != nil {
				cancel()
			}
		}
	}
}

// Lag returns the current replication lag (see Status.LagSeconds).
func (r *Replicator) Lag() time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return time.Duration(r.status.LagSeconds * float64(time.Second))
}
