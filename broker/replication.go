package broker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
	"github.com/meridianmq/meridian/internal/wire"
	"github.com/meridianmq/meridian/metadata"
	"github.com/meridianmq/meridian/replicator"
)

// ReplicatorCursorPrefix + region names a topic's replicator cursor for
// that remote region: an ordinary durable cursor of the topic, so that
// retention never deletes an entry it has not shipped.
const ReplicatorCursorPrefix = ReplDedupPrefix

// ReplicationConfig tunes the replicators of a broker. Zero fields take
// their defaults (see DefaultReplicationConfig).
type ReplicationConfig struct {
	// CheckInterval is how often each owned topic starts and stops its
	// replicators to match ReplicationRegions (default 1 s).
	CheckInterval time.Duration `yaml:"check_interval"`
	// KeeperInterval is how often the broker makes sure that every topic of
	// a replicated namespace with replicator backlog is loaded somewhere in
	// the region, so replication goes on without clients (default 3 s).
	KeeperInterval time.Duration `yaml:"keeper_interval"`
	// StallTimeout: a replicator with backlog and no progress this long is
	// reported stalled and restarts itself (default 30 s).
	StallTimeout time.Duration `yaml:"stall_timeout"`
	// MaxBackoff caps the wait between replication sessions (default 1 s).
	MaxBackoff time.Duration `yaml:"max_backoff"`
	// Keepalive is the gRPC keepalive of replication connections (gRPC
	// pings at most every 10 s whatever is asked) and the interval of the
	// empty requests an idle replication stream sends (default 1 s).
	Keepalive time.Duration `yaml:"keepalive"`
	// AckTimeout ends a replication session whose requests get no
	// acknowledgement for this long (default 5 s, at least 4 round trips):
	// a cut link, which stalls bytes rather than failing them, is noticed
	// within that, and the replicator reconnects.
	AckTimeout time.Duration `yaml:"ack_timeout"`
	// MinWindowBytes and MaxWindowBytes bound a replicator's bytes in
	// flight (defaults 1 MiB, 64 MiB); between them the window follows the
	// measured bandwidth x RTT.
	MinWindowBytes int64 `yaml:"min_window_bytes"`
	MaxWindowBytes int64 `yaml:"max_window_bytes"`
	// MaxInflightRequests bounds a replicator's requests in flight
	// (default 1024).
	MaxInflightRequests int `yaml:"max_inflight_requests"`
	// LagHoldTimeout bounds how long a send is held by the
	// max_replication_lag bound with action producer_hold before it fails
	// with QUOTA_EXCEEDED (default 10 s).
	LagHoldTimeout time.Duration `yaml:"lag_hold_timeout"`
	// MaxRelayWait bounds how long a relayed entry waits for its origin's
	// own live stream to the remote before this broker relays it anyway
	// (default 5 s; at most 10 min): an origin may be connected but slow.
	MaxRelayWait time.Duration `yaml:"max_relay_wait"`
	// MaxRelayHeldBytes bounds, per replicator (topic and remote), the
	// memory of the relayed entries waiting that way (their metadata, about
	// 170 bytes each; default 16 MiB, at most 1 GiB); past it the oldest
	// are relayed.
	MaxRelayHeldBytes int64 `yaml:"max_relay_held_bytes"`
	// MaxOriginSeqJump bounds, on the receiving side, how many origin_seq
	// numbers a direct entry may pass above the next one of its origin
	// stream without their being reported as skipped (replapply_jump.go):
	// a larger jump is refused as implausible (a forged entry near 2^63
	// would make every later real entry a DUPLICATE). 0 = default 65536;
	// -1 = none (strict: only the next number or reported skips); at most
	// 2^40.
	MaxOriginSeqJump int64 `yaml:"max_origin_seq_jump"`
}

// DefaultReplicationConfig returns the defaults.
func DefaultReplicationConfig() ReplicationConfig {
	return ReplicationConfig{CheckInterval: time.Second, KeeperInterval: 3 * time.Second, StallTimeout: 30 * time.Second,
		MaxBackoff: time.Second, Keepalive: time.Second, AckTimeout: 5 * time.Second, MinWindowBytes: 1 << 20, MaxWindowBytes: 64 << 20,
		MaxInflightRequests: 1024, LagHoldTimeout: 10 * time.Second,
		MaxRelayWait: replicator.DefaultMaxRelayWait, MaxRelayHeldBytes: replicator.DefaultMaxHeldBytes,
		MaxOriginSeqJump: DefaultMaxOriginSeqJump}
}

func (c ReplicationConfig) withDefaults() ReplicationConfig {
	d := DefaultReplicationConfig()
	set := func(v *time.Duration, def time.Duration) {
		if *v == 0 {
			*v = def
		}
	}
	set(&c.CheckInterval, d.CheckInterval)
	set(&c.KeeperInterval, d.KeeperInterval)
	set(&c.StallTimeout, d.StallTimeout)
	set(&c.MaxBackoff, d.MaxBackoff)
	set(&c.Keepalive, d.Keepalive)
	set(&c.AckTimeout, d.AckTimeout)
	set(&c.LagHoldTimeout, d.LagHoldTimeout)
	set(&c.MaxRelayWait, d.MaxRelayWait)
	if c.MaxRelayHeldBytes == 0 {
		c.MaxRelayHeldBytes = d.MaxRelayHeldBytes
	}
	if c.MinWindowBytes == 0 {
		c.MinWindowBytes = d.MinWindowBytes
	}
	if c.MaxWindowBytes == 0 {
		c.MaxWindowBytes = max(d.MaxWindowBytes, c.MinWindowBytes)
	}
	if c.MaxInflightRequests == 0 {
		c.MaxInflightRequests = d.MaxInflightRequests
	}
	if c.MaxOriginSeqJump == 0 {
		c.MaxOriginSeqJump = d.MaxOriginSeqJump
	}
	return c
}

// Validate checks the replication configuration (zero = default).
func (c ReplicationConfig) Validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: config: replication."+format, append([]any{ErrInvalidArgument}, a...)...)
	}
	switch {
	case c.CheckInterval < 0 || c.KeeperInterval < 0 || c.StallTimeout < 0 || c.MaxBackoff < 0 || c.LagHoldTimeout < 0 || c.AckTimeout < 0:
		return bad("intervals must be >= 0 (0 = default)")
	case c.Keepalive != 0 && c.Keepalive < 100*time.Millisecond:
		return bad("keepalive %v must be >= 100ms", c.Keepalive)
	case c.MinWindowBytes < 0 || c.MinWindowBytes > 1<<30:
		return bad("min_window_bytes %d must be in [0, 1 GiB]", c.MinWindowBytes)
	case c.MaxWindowBytes < 0 || c.MaxWindowBytes > 1<<30:
		return bad("max_window_bytes %d must be in [0, 1 GiB]", c.MaxWindowBytes)
	case c.MaxWindowBytes > 0 && c.MaxWindowBytes < c.MinWindowBytes:
		return bad("max_window_bytes %d must be >= min_window_bytes %d", c.MaxWindowBytes, c.MinWindowBytes)
	case c.MaxInflightRequests < 0 || c.MaxInflightRequests > 65536:
		return bad("max_inflight_requests %d must be in [0, 65536]", c.MaxInflightRequests)
	case c.MaxRelayWait < 0 || c.MaxRelayWait > 10*time.Minute:
		return bad("max_relay_wait %v must be in [0, 10m] (0 = default %v)", c.MaxRelayWait, replicator.DefaultMaxRelayWait)
	case c.MaxOriginSeqJump < -1 || c.MaxOriginSeqJump > maxOriginSeqJumpLimit:
		return bad("max_origin_seq_jump %d must be in [-1, %d] (0 = default %d, -1 = none)", c.MaxOriginSeqJump, int64(maxOriginSeqJumpLimit), DefaultMaxOriginSeqJump)
	case c.MaxRelayHeldBytes < 0 || c.MaxRelayHeldBytes > 1<<30:
		return bad("max_relay_held_bytes %d must be in [0, 1 GiB] (0 = default %d)", c.MaxRelayHeldBytes, replicator.DefaultMaxHeldBytes)
	}
	return nil
}

// replManager runs the broker's replicators: it reconciles each owned
// topic's replicators with its replication regions and keeps topics with
// replicator backlog loaded.
type replManager struct {
	s       *Server
	cfg     ReplicationConfig
	pool    *replicator.Pool
	metrics *replicator.Metrics

	// base is canceled by stop: it ends the loops' metadata calls.
	base       context.Context
	baseCancel context.CancelFunc
	stopCh     chan struct{}
	done       chan struct{}
	stopOnce   sync.Once
	started    atomic.Bool
}

func newReplManager(s *Server) (*replManager, error) {
	m, err := replicator.NewMetrics(s.cfg.Registerer)
	if err != nil {
		return nil, err
	}
	cfg := s.cfg.Replication.withDefaults()
	base, cancel := context.WithCancel(context.Background())
	rm := &replManager{s: s, cfg: cfg, metrics: m, base: base, baseCancel: cancel, stopCh: make(chan struct{}), done: make(chan struct{}),
		pool: &replicator.Pool{DialAddr: s.dialAddr, Keepalive: cfg.Keepalive, MaxMessageBytes: s.cfg.MaxMessageBytes + 2<<20, Security: s.sec}}
	if s.cfg.Registerer != nil {
		if err := s.cfg.Registerer.Register(&replCollector{s: s}); err != nil {
			return nil, err
		}
		if err := s.cfg.Registerer.Register(&subSyncCollector{s: s}); err != nil {
			return nil, err
		}
	}
	return rm, nil
}

// start runs the reconcile and keeper loops until stop.
func (m *replManager) start() {
	m.started.Store(true)
	go m.loop()
}

// stop ends the loops (the topics stop their replicators when they close).
func (m *replManager) stop() {
	m.stopOnce.Do(func() {
		close(m.stopCh)
		m.baseCancel()
	})
	if !m.started.Load() {
		return
	}
	select {
	case <-m.done:
	case <-time.After(m.s.cfg.OperationTimeout):
	}
}

// closePool closes the connections to remote brokers.
func (m *replManager) closePool() { m.pool.Close() }

func (m *replManager) loop() {
	defer close(m.done)
	check := time.NewTicker(m.cfg.CheckInterval)
	defer check.Stop()
	keep := time.NewTicker(m.cfg.KeeperInterval)
	defer keep.Stop()
	for {
		select {
		case <-m.stopCh:
			return
		case <-check.C:
			for _, t := range m.s.loadedTopics() {
				m.sync(t)
			}
		case <-keep.C:
			if err := m.keep(); err != nil {
				m.s.log.Debug("replication keeper", "err", err)
			}
		}
	}
}

func (m *replManager) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(m.base, min(m.s.cfg.OperationTimeout, 10*time.Second))
}

// topicLoaded starts the replicators of a topic that was just loaded.
func (m *replManager) topicLoaded(t *topic) {
	go m.sync(t)
}

// wantedRemotes returns the remote regions t replicates to now. ok=false
// when they are unknown (metadata unreachable): the running replicators
// then go on with the regions last seen.
func (m *replManager) wantedRemotes(ctx context.Context, t *topic) ([]string, bool) {
	regions, err := m.s.ReplicationRegions(ctx, t.name)
	if err != nil {
		return nil, false
	}
	self := m.s.cfg.Region
	if !slices.Contains(regions, self) {
		return nil, true
	}
	var out []string
	for _, r := range regions {
		if r != self && r != "" && !slices.Contains(out, r) {
			out = append(out, r)
		}
	}
	return out, true
}

// sync starts and stops t's replicators to match its replication regions,
// and refreshes its policies (rate limits, lag bound).
func (m *replManager) sync(t *topic) {
	ctx, cancel := m.ctx()
	defer cancel()
	if t.stopped() {
		return
	}
	t.replicators.syncMu.Lock()
	defer t.replicators.syncMu.Unlock()
	t.refreshPolicies(ctx)
	want, ok := m.wantedRemotes(ctx, t)
	if !ok {
		return
	}
	for _, remote := range t.replicators.remotes() {
		if !slices.Contains(want, remote) {
			t.replicators.stopOne(remote)
			t.log.Info("replicator stopped: region no longer a replication region (its cursor is kept)", "remote", remote)
		} else if t.replicators.cursorDeleted(remote) {
			// Its cursor was deleted under it (admin): start again from a new
			// one at the earliest retained entry (the remote drops what it has).
			t.replicators.stopOne(remote)
			t.log.Warn("replicator cursor was deleted; restarting the replicator with a new cursor", "remote", remote)
		}
	}
	for _, remote := range want {
		if t.replicators.has(remote) {
			continue
		}
		if err := m.startOne(ctx, t, remote); err != nil {
			t.log.Warn("start replicator", "remote", remote, "err", err)
		}
	}
	m.syncSubSenders(t, want)
}

// startOne creates (or reuses) the cursor and starts the replicator.
func (m *replManager) startOne(ctx context.Context, t *topic, remote string) error {
	sub, created, err := t.getOrCreateSub(ctx, ReplicatorCursorPrefix+remote, clientv1.InitialPosition_INITIAL_POSITION_EARLIEST, false)
	if err != nil {
		return err
	}
	if created {
		t.log.Info("replicator cursor created at the earliest retained entry (backfill)", "remote", remote)
	}
	src := &replSource{t: t, sub: sub, self: m.s.cfg.Region, appended: make(chan struct{}, 1)}
	d := &replicator.Dialer{Pool: m.pool, Topic: t.name.String(), Source: m.s.cfg.Region, Target: remote,
		Endpoints: func(ctx context.Context) ([]string, error) {
			rec, err := m.s.RegionInfo(ctx, remote)
			if err != nil {
				return nil, err
			}
			return rec.Endpoints(), nil
		}}
	r, err := replicator.New(replicator.Config{
		Self: m.s.cfg.Region, Remote: remote, Topic: t.name.String(), Source: src, Connect: d.Connect,
		Limits: replicator.Limits{MinWindow: m.cfg.MinWindowBytes, MaxWindow: m.cfg.MaxWindowBytes,
			MaxRequests: m.cfg.MaxInflightRequests, RequestBytes: int64(min(512<<10, m.s.cfg.MaxMessageBytes)),
			MaxRelayWait: m.cfg.MaxRelayWait, MaxHeldBytes: m.cfg.MaxRelayHeldBytes},
		StallTimeout: m.cfg.StallTimeout, MaxBackoff: m.cfg.MaxBackoff, AckTimeout: m.cfg.AckTimeout, IdleProbe: m.cfg.Keepalive,
		Rates: func() (int64, int64) {
			pol := t.currentPolicies()
			return pol.GetReplicatorRateMsgs(), pol.GetReplicatorRateBytes()
		},
		Metrics: m.metrics, Logger: m.s.log,
	})
	if err != nil {
		return err
	}
	if !t.replicators.add(remote, &topicReplicator{r: r, src: src}) {
		return nil // the topic is closing
	}
	r.Start()
	t.log.Info("replicator started", "remote", remote)
	return nil
}

// topicRepl is a topic's set of replicators (one per remote region).
type topicRepl struct {
	// syncMu serializes reconciliations.
	syncMu sync.Mutex

	// mu guards the fields below.
	mu     sync.Mutex
	reps   map[string]*topicReplicator
	closed bool
	// peeks caches, per remote, the publish time of the entry after its
	// cursor (replicationLag); one entry per remote region.
	peeks map[string]lagPeek
}

type topicReplicator struct {
	r   *replicator.Replicator
	src *replSource
}

func (tr *topicRepl) add(remote string, x *topicReplicator) bool {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if tr.closed {
		return false
	}
	if tr.reps == nil {
		tr.reps = map[string]*topicReplicator{}
	}
	tr.reps[remote] = x
	return true
}

func (tr *topicRepl) has(remote string) bool {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	_, ok := tr.reps[remote]
	return ok
}

// cursorDeleted reports whether remote's replicator lost its cursor.
func (tr *topicRepl) cursorDeleted(remote string) bool {
	tr.mu.Lock()
	x := tr.reps[remote]
	tr.mu.Unlock()
	if x == nil {
		return false
	}
	x.src.sub.mu.Lock()
	defer x.src.sub.mu.Unlock()
	return x.src.sub.deleted
}

func (tr *topicRepl) remotes() []string {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	out := make([]string, 0, len(tr.reps))
	for r := range tr.reps {
		out = append(out, r)
	}
	sort.Strings(out)
	return out
}

func (tr *topicRepl) list() []*topicReplicator {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	out := make([]*topicReplicator, 0, len(tr.reps))
	for _, x := range tr.reps {
		out = append(out, x)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].r.Remote() < out[j].r.Remote() })
	return out
}

func (tr *topicRepl) stopOne(remote string) {
	tr.mu.Lock()
	x := tr.reps[remote]
	delete(tr.reps, remote)
	tr.mu.Unlock()
	if x != nil {
		x.r.Stop()
	}
}

// stopAll stops every replicator; none starts afterwards. The topic calls
// it when it closes (unload, move, broker stop).
func (tr *topicRepl) stopAll() {
	tr.mu.Lock()
	tr.closed = true
	reps := tr.reps
	tr.reps = nil
	tr.mu.Unlock()
	var wg sync.WaitGroup
	for _, x := range reps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			x.r.Stop()
		}()
	}
	wg.Wait()
}

// kick tells every replicator that entries were stored.
func (tr *topicRepl) kick() {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	for _, x := range tr.reps {
		select {
		case x.src.appended <- struct{}{}:
		default:
		}
	}
}

// currentPolicies returns the topic's namespace policies as last read.
func (t *topic) currentPolicies() *clientv1.NamespacePolicies {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.policies
}

// replSource is a topic read through one replicator cursor
// (replicator.Source).
type replSource struct {
	t        *topic
	sub      *subscription
	self     string
	appended chan struct{}
}

func toPos(p replicator.Position) pos           { return pos{p.Ledger, p.Entry} }
func fromPos(p pos) replicator.Position         { return replicator.Position{Ledger: p.L, Entry: p.E} }
func (s *replSource) Appended() <-chan struct{} { return s.appended }

func (s *replSource) MarkDeleted() replicator.Position { return fromPos(s.sub.markDeletePos()) }

func (s *replSource) ReadAfter(ctx context.Context, after replicator.Position, maxN int) ([]replicator.Entry, error) {
	ml := s.t.ml
	ml.mu.Lock()
	next, ok := ml.nextLocked(toPos(after))
	ml.mu.Unlock()
	if !ok {
		return nil, nil
	}
	ents, err := ml.read(ctx, next, maxN)
	out := make([]replicator.Entry, 0, len(ents))
	for _, e := range ents {
		out = append(out, s.shipForm(pos{e.LedgerID, e.EntryID}, e.Data))
	}
	return out, err
}

// shipForm converts a stored entry to the replicator's form
// (topic.shipForm: a local entry gets its origin filled in, origin_seq being
// the local number stored with it, see replication_seq.go; a replicated one
// is shipped as stored, for a relay; the payload is never touched). An
// entry that cannot be shipped (undecodable) is logged and marked not to
// replicate: the cursor must not stall on it.
func (s *replSource) shipForm(p pos, data []byte) replicator.Entry {
	out, md, err := s.t.shipForm(LedgerEntry{LedgerID: p.L, EntryID: p.E, Data: data})
	if err != nil {
		s.t.log.Error("entry not replicated", "ledger", p.L, "entry", p.E, "err", err)
		return replicator.Entry{Pos: fromPos(p), NoReplicate: true}
	}
	return replicator.Entry{Pos: fromPos(p), Data: out, Origin: md.GetOriginRegion(), OriginSeq: md.GetOriginSeq(),
		Stream: entryStream(md), Targets: md.GetReplicateTo(), NoReplicate: md.GetDisableReplication(), Messages: int(md.GetNumMessages()),
		PublishMs: md.GetBrokerPublishTimeMs()}
}

func (s *replSource) MarkDelete(p replicator.Position) error {
	q := toPos(p)
	sub := s.sub
	sub.mu.Lock()
	defer sub.mu.Unlock()
	if sub.deleted {
		return fmt.Errorf("%w: replicator cursor %s was deleted", ErrNotFound, sub.name)
	}
	ml := s.t.ml
	ml.mu.Lock()
	defer ml.mu.Unlock()
	if _, ok := ml.seqOf[q.L]; !ok || !ml.lessLocked(sub.markDelete, q) {
		return nil
	}
	sub.markDelete = q
	sub.lastRead = q
	sub.dirty = true
	return nil
}

func (s *replSource) Backlog() (int64, int64) {
	sub := s.sub
	sub.mu.Lock()
	md := sub.markDelete
	sub.mu.Unlock()
	ml := s.t.ml
	ml.mu.Lock()
	defer ml.mu.Unlock()
	return ml.countAfterLocked(md), ml.bytesAfterLocked(md)
}

// replicatorStats reports t's replicators for TopicStats.
func (t *topic) replicatorStats() []*clientv1.ReplicatorStats {
	reps := t.replicators.list()
	if len(reps) == 0 {
		return nil
	}
	pol := t.currentPolicies()
	total, _ := t.ml.totals()
	out := make([]*clientv1.ReplicatorStats, 0, len(reps))
	for _, x := range reps {
		st := x.r.Status()
		rs := &clientv1.ReplicatorStats{RemoteRegion: st.Remote, Connected: st.Connected,
			BacklogEntries: st.BacklogEntries, BacklogBytes: st.BacklogBytes, LagSeconds: st.LagSeconds,
			MsgRateOut: st.MsgRateOut, BytesRateOut: st.ByteRateOut, Stalled: st.Stalled, LastError: st.LastError,
			BackfillProgress: 1, SentEntries: st.SentEntries, Reconnects: st.Reconnects, WindowBytes: st.Window,
			RttMs: float64(st.RTT.Microseconds()) / 1000}
		if total > 0 {
			rs.BackfillProgress = max(0, 1-float64(st.BacklogEntries)/float64(total))
		}
		if bound := lagBound(pol, st.Remote); bound > 0 {
			// The bound as the send gate sees it (from the cursor, exact
			// once past the bound), so stats and refusals agree.
			ctx, cancel := context.WithTimeout(context.Background(), statsReadTimeout)
			lag := t.replicationLag(ctx, st.Remote, bound)
			cancel()
			rs.MaxLagMs = bound.Milliseconds()
			rs.LagBoundExceeded = lag > bound
			if rs.LagBoundExceeded {
				rs.LagSeconds = max(rs.LagSeconds, lag.Seconds())
			}
		}
		out = append(out, rs)
	}
	return out
}

// lagBound returns the namespace's max replication lag to remote (0: none).
func lagBound(pol *clientv1.NamespacePolicies, remote string) time.Duration {
	ms := pol.GetMaxReplicationLagMs()
	if ms <= 0 {
		return 0
	}
	if rs := pol.GetMaxReplicationLagRegions(); len(rs) > 0 && !slices.Contains(rs, remote) {
		return 0
	}
	return time.Duration(ms) * time.Millisecond
}

// replicationRemotes returns the remote regions of t's replication set;
// when they cannot be read (metadata unreachable and not cached), the
// remotes of its running replicators.
func (t *topic) replicationRemotes(ctx context.Context) []string {
	if t.b.repl != nil {
		if want, ok := t.b.repl.wantedRemotes(ctx, t); ok {
			return want
		}
	}
	return t.replicators.remotes()
}

// lagPeek is the publish time (ms) of the entry at p, the first entry
// after a replicator cursor's mark-delete when it was read.
type lagPeek struct {
	p  pos
	ms int64
}

// replicationLag returns the replication lag to remote: the age of the
// first entry after its replicator cursor's mark-delete (0 when the
// cursor is caught up). It is computed from the cursor itself, not from
// the replicator's status (refreshed only every 500 ms, and absent until
// the replicator starts after a load), so the lag bound holds from the
// first send after a load or an ownership move.
//
// Publish times grow along the log, so the time read for an earlier
// position bounds the lag from above: while that bound is within bound,
// nothing is read; past it, the entry after the cursor is read (once per
// cursor position) for the exact lag. A topic without the cursor yet
// reports the replicator's own lag, if any.
func (t *topic) replicationLag(ctx context.Context, remote string, bound time.Duration) time.Duration {
	fallback := func() time.Duration {
		for _, x := range t.replicators.list() {
			if x.r.Remote() == remote {
				return x.r.Lag()
			}
		}
		return 0
	}
	sub, err := t.subscription(ReplicatorCursorPrefix + remote)
	if err != nil {
		return fallback()
	}
	md := sub.markDeletePos()
	ml := t.ml
	ml.mu.Lock()
	next, ok := ml.nextLocked(md)
	tr := &t.replicators
	tr.mu.Lock()
	c, hit := tr.peeks[remote]
	tr.mu.Unlock()
	earlier := hit && ml.lessLocked(c.p, next)
	ml.mu.Unlock()
	if !ok {
		return 0
	}
	now := time.Now().UnixMilli()
	age := func(ms int64) time.Duration { return time.Duration(max(now-ms, 0)) * time.Millisecond }
	if hit && (c.p == next || (earlier && age(c.ms) <= bound)) {
		return age(c.ms)
	}
	e, err := t.readOne(ctx, next)
	var emd *clientv1.EntryMetadata
	if err == nil {
		emd, _, err = wire.DecodeEntry(e.Data)
	}
	if err != nil {
		t.log.Debug("replication lag: entry after the replicator cursor unreadable", "remote", remote, "err", err)
		if earlier {
			return age(c.ms)
		}
		return fallback()
	}
	c = lagPeek{p: next, ms: originTime(emd)}
	tr.mu.Lock()
	if tr.peeks == nil {
		tr.peeks = map[string]lagPeek{}
	}
	tr.peeks[remote] = c
	tr.mu.Unlock()
	return age(c.ms)
}

// lagBoundErr returns the lag-bound refusal for the first bounded remote
// of t past its bound, else nil. The error wraps ErrQuotaRefused for
// action producer_error (final: the client fails the send at once), else
// ErrQuotaExceeded.
func (t *topic) lagBoundErr(ctx context.Context, pol *clientv1.NamespacePolicies) error {
	for _, remote := range t.replicationRemotes(ctx) {
		bound := lagBound(pol, remote)
		if bound <= 0 {
			continue
		}
		if lag := t.replicationLag(ctx, remote, bound); lag > bound {
			sentinel := ErrQuotaExceeded
			if pol.GetMaxReplicationLagAction() == clientv1.QuotaAction_QUOTA_ACTION_PRODUCER_ERROR {
				sentinel = ErrQuotaRefused
			}
			return fmt.Errorf("%w: replication lag to region %s is %.1fs, bound %v (max_replication_lag)",
				sentinel, remote, lag.Seconds(), bound)
		}
	}
	return nil
}

// replicationLagGate applies the namespace's max_replication_lag bound to a
// producer's send: nil when every bounded remote is within it; else,
// with action producer_error, ErrQuotaRefused at once (a final refusal),
// and with producer_hold, it waits until the lag is back within the bound
// (or ctx ends, or LagHoldTimeout passes: ErrQuotaExceeded, which the
// client retries). Replicated writes do not come through here: they are
// never held.
func (t *topic) replicationLagGate(ctx context.Context) error {
	pol := t.currentPolicies()
	if pol.GetMaxReplicationLagMs() <= 0 {
		return nil
	}
	err := t.lagBoundErr(ctx, pol)
	if err == nil || pol.GetMaxReplicationLagAction() == clientv1.QuotaAction_QUOTA_ACTION_PRODUCER_ERROR {
		return err
	}
	return t.holdWhile(ctx, err, func() error {
		pol := t.currentPolicies()
		if pol.GetMaxReplicationLagMs() <= 0 {
			return nil
		}
		return t.lagBoundErr(ctx, pol)
	})
}

// holdWhile holds a producer's send while check fails (polled every
// 50 ms), at most LagHoldTimeout; it returns nil once check passes, else
// the last refusal (ErrQuotaExceeded, retried by the client), or
// ErrTopicNotOwned when the topic closes.
func (t *topic) holdWhile(ctx context.Context, err error, check func() error) error {
	deadline := time.NewTimer(t.b.cfg.Replication.withDefaults().LagHoldTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return err
		case <-t.stop:
			return ErrTopicNotOwned
		case <-deadline.C:
			return err
		case <-tick.C:
		}
		if err = check(); err == nil {
			return nil
		}
	}
}

// DeleteReplicatorCursors deletes the replicator cursors for region of
// every topic of namespace in this region (topics owned by other brokers
// are handled there). It refuses while region is still one of the
// namespace's replication regions. Without confirm it only lists the
// topics. It never touches the data of the removed region.
func (s *Server) DeleteReplicatorCursors(ctx context.Context, namespace, region string, confirm bool) ([]string, error) {
	if _, _, err := ParseNamespace(namespace); err != nil {
		return nil, err
	}
	if err := ValidateName("region", region); err != nil {
		return nil, err
	}
	pol, err := s.getPolicies(ctx, namespace)
	if err != nil {
		return nil, err
	}
	if slices.Contains(pol.GetReplicationRegions(), region) {
		return nil, fmt.Errorf("%w: region %s is still a replication region of %s; remove it from the namespace first", ErrNotAllowed, region, namespace)
	}
	topics, err := listTopicKeys(ctx, s.cfg.Regional, managedLedgerPrefix+namespace+"/")
	if err != nil {
		return nil, err
	}
	name := ReplicatorCursorPrefix + region
	var found []string
	for _, tp := range topics {
		full := namespace + "/" + tp
		if _, err := s.cfg.Regional.Get(ctx, cursorPrefix+full+"/"+name, metadata.ReadOptions{}); err != nil {
			continue
		}
		found = append(found, full)
	}
	if !confirm {
		return found, nil
	}
	a := &adminService{b: s}
	for _, full := range found {
		t, fwd, err := a.owned(ctx, full, false)
		if fwd != nil {
			_, err = fwd.DeleteSubscription(ctx, &clientv1.DeleteSubscriptionRequest{Topic: full, Subscription: name, Force: true})
			if err != nil && !errors.Is(FromGRPC(err), ErrNotFound) {
				return found, fmt.Errorf("delete cursor %s of %s on its owner: %w", name, full, FromGRPC(err))
			}
			continue
		}
		if err != nil {
			return found, fmt.Errorf("load %s: %w", full, err)
		}
		t.replicators.stopOne(region)
		if err := t.deleteSub(ctx, name, true); err != nil && !errors.Is(err, ErrNotFound) {
			return found, fmt.Errorf("delete cursor %s of %s: %w", name, full, err)
		}
		s.log.Info("replicator cursor deleted", "topic", full, "region", region)
	}
	return found, nil
}
