package metadata

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/lni/dragonboat/v4"
	dbconfig "github.com/lni/dragonboat/v4/config"
	dblogger "github.com/lni/dragonboat/v4/logger"
	sm "github.com/lni/dragonboat/v4/statemachine"
	"github.com/meridianmq/meridian/internal/netguard"
	"github.com/meridianmq/meridian/security"
	"google.golang.org/grpc"
)

var quietOnce sync.Once

// quietDragonboat lowers Dragonboat's process-wide loggers to errors, once.
func quietDragonboat() {
	quietOnce.Do(func() {
		for _, name := range []string{"dragonboat", "raft", "rsm", "transport", "logdb", "pebblekv", "config",
			"raftpb", "registry", "server", "settings", "gossip", "tan", "LogDB", "grpc"} {
			dblogger.GetLogger(name).SetLevel(dblogger.ERROR)
		}
		// Losing a peer is normal in failover; its connection errors are noise.
		dblogger.GetLogger("transport").SetLevel(dblogger.CRITICAL)
	})
}

// Node is one metadata server: a Dragonboat NodeHost with one replica of
// each configured shard, an optional gRPC server (the metadata service) and
// an optional HTTP server (/metrics, /healthz, /readyz).
type Node struct {
	cfg     NodeConfig
	log     *slog.Logger
	metrics *metrics
	// tmetrics count the Raft transport with dial rewrite (when used).
	tmetrics *raftTransportMetrics
	clock    Clock

	// Set by Start, read-only afterwards.
	nh      *dragonboat.NodeHost
	shards  map[string]*shardStore
	byID    map[uint64]*shardStore
	grpcLis net.Listener
	grpcSrv *grpc.Server
	httpLis net.Listener
	httpSrv *http.Server
	// sec is the security runtime (set by Start); ownSec: built by Start,
	// closed by Stop.
	sec      *security.Runtime
	ownSec   bool
	watchSem chan struct{}
	// watchMu guards clientWatches: the watches each client holds here.
	watchMu       sync.Mutex
	clientWatches map[string]int
	cancel        context.CancelFunc
	wg            sync.WaitGroup

	// nhMu is held shared by every call that reaches a state machine
	// (nhCall) and exclusively by Close.
	nhMu sync.RWMutex

	// mu guards started and stopped.
	mu      sync.Mutex
	started bool
	stopped bool
}

// NewNode validates cfg and returns a node that is not started.
func NewNode(cfg NodeConfig) (*Node, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.Shards = slices.Clone(cfg.Shards)
	cfg.RaftDialRewrite = maps.Clone(cfg.RaftDialRewrite)
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	clock := cfg.Expert.Clock
	if cfg.FaultInjection {
		if _, ok := clock.(*SkewClock); !ok {
			clock = NewSkewClock(clock)
		}
	}
	if clock == nil {
		clock = SystemClock()
	}
	return &Node{
		cfg:      cfg,
		clock:    clock,
		log:      log.With("component", "metadata", "node", cfg.NodeID),
		metrics:  newMetrics(cfg.Registerer),
		tmetrics: newRaftTransportMetrics(cfg.Registerer),
		watchSem: make(chan struct{}, cfg.MaxWatches),

		clientWatches: map[string]int{},
	}, nil
}

// Start opens the NodeHost, starts every shard's replica and the servers.
// It returns once they are started; shards may not have a leader yet (see
// WaitReady). A node cannot be started twice.
func (n *Node) Start(ctx context.Context) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.started {
		return errors.New("metadata: node already started")
	}
	n.started = true
	// The node's data (Raft logs, snapshots, sessions) is readable by its
	// user only: Dragonboat creates what is below with its own modes.
	if err := os.MkdirAll(n.cfg.DataDir, 0o700); err != nil {
		return fmt.Errorf("metadata: data_dir: %w", err)
	}
	n.sec = n.cfg.SecurityRuntime
	if n.sec == nil {
		sec, err := security.NewRuntime(n.cfg.Security, n.log.With("component", "security"))
		if err != nil {
			return fmt.Errorf("metadata: %w", err)
		}
		n.sec, n.ownSec = sec, true
	}
	if err := n.sec.CheckCertificateRole("security.tls.cert_file", security.KindMetadata, ""); err != nil {
		n.closeSec()
		return fmt.Errorf("metadata: %w", err)
	}
	sc := n.sec.Config()
	for _, l := range []struct{ field, addr string }{
		{"metadata.raft_address", n.cfg.RaftAddress}, {"metadata.grpc_address", n.cfg.GRPCAddress}, {"metadata.http_address", n.cfg.HTTPAddress},
	} {
		if err := security.CheckExposure(l.field, l.addr, sc, n.log); err != nil {
			n.closeSec()
			return err
		}
	}
	if err := n.sec.Register(n.cfg.Registerer, "metadata"); err != nil {
		n.closeSec()
		return fmt.Errorf("metadata: register metrics: %w", err)
	}
	guard, err := netguard.NewMetrics(n.cfg.Registerer, "metadata")
	if err != nil {
		n.closeSec()
		return fmt.Errorf("metadata: register metrics: %w", err)
	}
	quietDragonboat()
	expert := dbconfig.ExpertConfig{
		LogDB: dbconfig.GetTinyMemLogDBConfig(),
		// Always Meridian's transport: Dragonboat's own crashes on a
		// hostile frame (see RaftTransportDragonboat).
		TransportFactory: newRaftTransportFactory(n.cfg.RaftDialRewrite, n.sec.TLS(), n.log, n.tmetrics,
			n.cfg.MaxConnectionsPerIP, guard.RefusedPerIP("raft")),
	}
	nh, err := dragonboat.NewNodeHost(dbconfig.NodeHostConfig{
		NodeHostDir:       filepath.Join(n.cfg.DataDir, "nodehost"),
		RTTMillisecond:    uint64(n.cfg.RTT / time.Millisecond),
		RaftAddress:       n.cfg.RaftAddress,
		RaftEventListener: leaderListener{n},
		Expert:            expert,
	})
	if err != nil {
		n.closeSec()
		return fmt.Errorf("metadata: start node host at %s: %w", n.cfg.RaftAddress, err)
	}
	n.nh = nh
	n.shards = map[string]*shardStore{}
	n.byID = map[uint64]*shardStore{}
	for _, sc := range n.cfg.Shards {
		st := &shardStore{node: n, name: sc.Name, shardID: sc.ShardID, notify: newNotifier()}
		n.shards[sc.Name] = st
		n.byID[sc.ShardID] = st
		n.metrics.isLeader.WithLabelValues(sc.Name).Set(0)
		members := map[uint64]dragonboat.Target{}
		for id, addr := range sc.Members {
			members[id] = addr
		}
		notify := st.notify
		create := func(shardID, replicaID uint64) sm.IStateMachine {
			return newStateMachine(shardID, n.cfg.HistoryEvents, n.cfg.HistoryBytes, notify)
		}
		rc := dbconfig.Config{
			ReplicaID:          n.cfg.NodeID,
			ShardID:            sc.ShardID,
			CheckQuorum:        true,
			PreVote:            true,
			ElectionRTT:        n.cfg.ElectionTicks,
			HeartbeatRTT:       n.cfg.HeartbeatTicks,
			SnapshotEntries:    n.cfg.SnapshotEntries,
			CompactionOverhead: n.cfg.CompactionOverhead,
		}
		// The identical initial member map is valid on first start and on
		// restart, so the node never needs to know whether its dir is fresh.
		if err := nh.StartReplica(members, false, create, rc); err != nil {
			n.stopLocked()
			return fmt.Errorf("metadata: start shard %q (id %d): %w", sc.Name, sc.ShardID, err)
		}
	}
	tctx, cancel := context.WithCancel(context.Background())
	n.cancel = cancel
	n.wg.Add(1)
	go n.tickLoop(tctx)
	if n.cfg.GRPCAddress != "" {
		lis, err := net.Listen("tcp", n.cfg.GRPCAddress)
		if err != nil {
			n.stopLocked()
			return fmt.Errorf("metadata: grpc_address %s: %w", n.cfg.GRPCAddress, err)
		}
		lis = netguard.LimitPerIP(lis, n.cfg.MaxConnectionsPerIP, guard.RefusedPerIP("grpc"))
		n.grpcLis = lis
		n.grpcSrv = newGRPCServer(n)
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			if err := n.grpcSrv.Serve(lis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
				n.log.Error("grpc server stopped", "err", err)
			}
		}()
	}
	if n.cfg.HTTPAddress != "" {
		lis, err := net.Listen("tcp", n.cfg.HTTPAddress)
		if err != nil {
			n.stopLocked()
			return fmt.Errorf("metadata: http_address %s: %w", n.cfg.HTTPAddress, err)
		}
		lis = netguard.LimitPerIP(lis, n.cfg.MaxConnectionsPerIP, guard.RefusedPerIP("http"))
		n.httpLis = lis
		// Health probes stay open: a kubelet cannot present a token.
		n.httpSrv = n.cfg.HTTPServer(n.sec.HTTPHandler(httpAuthorize(n.sec, n.httpHandler()), "/healthz", "/readyz"),
			slog.NewLogLogger(n.log.Handler(), slog.LevelDebug))
		tl := n.sec.HTTPListener(lis)
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			if err := n.httpSrv.Serve(tl); err != nil && !errors.Is(err, http.ErrServerClosed) {
				n.log.Error("http server stopped", "err", err)
			}
		}()
	}
	n.log.Info("metadata node started", "raft", n.cfg.RaftAddress, "grpc", n.GRPCAddr(), "http", n.HTTPAddr(), "shards", len(n.cfg.Shards))
	return nil
}

// StartEmbedded creates, starts and waits for a node: the embedded store of
// a single process (see SingleNodeConfig). Use Node.Store for each shard and
// Node.Stop when done.
func StartEmbedded(ctx context.Context, cfg NodeConfig) (*Node, error) {
	n, err := NewNode(cfg)
	if err != nil {
		return nil, err
	}
	if err := n.Start(ctx); err != nil {
		return nil, err
	}
	if err := n.WaitReady(ctx); err != nil {
		n.Stop()
		return nil, err
	}
	return n, nil
}

// Stop stops the servers and the NodeHost. It is safe to call more than once.
func (n *Node) Stop() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.stopLocked()
}

func (n *Node) stopLocked() {
	if n.stopped || !n.started {
		return
	}
	n.stopped = true
	if n.cancel != nil {
		n.cancel()
	}
	for _, st := range n.shards {
		st.notify.close()
	}
	if n.grpcSrv != nil {
		// Watches are long streams: give them a moment, then cut them.
		done := make(chan struct{})
		go func() { n.grpcSrv.GracefulStop(); close(done) }()
		select {
		case <-done:
		case <-time.After(2 * time.Second):
			n.grpcSrv.Stop()
		}
	}
	if n.httpSrv != nil {
		_ = n.httpSrv.Close()
	}
	n.wg.Wait()
	if n.nh != nil {
		// Wait for the state machine calls in flight (nhCall): Close
		// destroys the state machines without waiting for lookups, a data
		// race the race detector found in TestLinearizability.
		n.nhMu.Lock()
		n.nh.Close()
		n.nhMu.Unlock()
	}
	n.closeSec()
	n.log.Info("metadata node stopped")
}

// closeSec closes the security runtime if the node built it.
func (n *Node) closeSec() {
	if n.ownSec {
		_ = n.sec.Close()
	}
}

// Store returns the in-process Store of a hosted shard (no gRPC involved).
func (n *Node) Store(shard string) (Store, error) {
	st, err := n.shard(shard)
	if err != nil {
		return nil, err
	}
	return st, nil
}

func (n *Node) shard(name string) (*shardStore, error) {
	if !n.isStarted() {
		return nil, fmt.Errorf("%w: node not started", ErrUnavailable)
	}
	st, ok := n.shards[name]
	if !ok {
		hosted := make([]string, 0, len(n.shards))
		for k := range n.shards {
			hosted = append(hosted, k)
		}
		slices.Sort(hosted)
		return nil, fmt.Errorf("%w: shard %q is not hosted here (hosted: %v)", ErrInvalidArgument, name, hosted)
	}
	return st, nil
}

func (n *Node) isStarted() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.started && n.nh != nil
}

// Config returns the node's validated config.
func (n *Node) Config() NodeConfig { return n.cfg }

// GRPCAddr is the gRPC listen address ("" if none).
func (n *Node) GRPCAddr() string {
	if n.grpcLis == nil {
		return ""
	}
	return n.grpcLis.Addr().String()
}

// HTTPAddr is the HTTP listen address ("" if none).
func (n *Node) HTTPAddr() string {
	if n.httpLis == nil {
		return ""
	}
	return n.httpLis.Addr().String()
}

// LeaderID returns the shard's leader replica ID as this node knows it
// (ok false if none is known).
func (n *Node) LeaderID(shard string) (uint64, bool) {
	st, err := n.shard(shard)
	if err != nil {
		return 0, false
	}
	id, _, valid, err := n.nh.GetLeaderID(st.shardID)
	if err != nil || !valid || id == 0 {
		return 0, false
	}
	return id, true
}

// Ready reports whether every hosted shard has a known leader.
func (n *Node) Ready() bool {
	if !n.isStarted() {
		return false
	}
	for name := range n.shards {
		if _, ok := n.LeaderID(name); !ok {
			return false
		}
	}
	return true
}

// WaitReady waits until every hosted shard has a leader and answers a
// linearizable read on this node.
func (n *Node) WaitReady(ctx context.Context) error {
	for _, sc := range n.cfg.Shards {
		st, err := n.shard(sc.Name)
		if err != nil {
			return err
		}
		for {
			rctx, cancel := context.WithTimeout(ctx, time.Second)
			var err error
			n.nhCall(func() { _, err = n.nh.SyncRead(rctx, st.shardID, statsQuery{}) })
			cancel()
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				return fmt.Errorf("%w: shard %q not ready: %w", ErrUnavailable, sc.Name, ctx.Err())
			}
			wait(ctx, 20*time.Millisecond)
		}
	}
	return nil
}

// acquireWatch takes a watch slot for client ("" = not counted per
// client): ErrLimitExceeded when the client holds max_watches_per_client,
// ErrUnavailable when the node serves max_watches (another node may not).
func (n *Node) acquireWatch(client string) error {
	if client != "" {
		n.watchMu.Lock()
		defer n.watchMu.Unlock()
		if held := n.clientWatches[client]; held >= n.cfg.MaxWatchesPerClient {
			return fmt.Errorf("%w: max_watches_per_client %d reached: client %q holds %d watches on this node", ErrLimitExceeded, n.cfg.MaxWatchesPerClient, client, held)
		}
	}
	select {
	case n.watchSem <- struct{}{}:
	default:
		return fmt.Errorf("%w: too many watches on this node (max_watches %d)", ErrUnavailable, n.cfg.MaxWatches)
	}
	n.metrics.watches.Inc()
	if client != "" {
		n.clientWatches[client]++
	}
	return nil
}

// releaseWatch returns a slot taken by acquireWatch(client).
func (n *Node) releaseWatch(client string) {
	if client != "" {
		n.watchMu.Lock()
		if n.clientWatches[client]--; n.clientWatches[client] <= 0 {
			delete(n.clientWatches, client)
		}
		n.watchMu.Unlock()
	}
	<-n.watchSem
	n.metrics.watches.Dec()
}

// tickLoop makes the leader of each hosted shard propose its clock: right
// after it becomes leader (renewing every session, so no session expires
// for lack of a leader during an election) and whenever some session is due.
func (n *Node) tickLoop(ctx context.Context) {
	defer n.wg.Done()
	t := time.NewTicker(n.cfg.SessionTick)
	defer t.Stop()
	wasLeader := map[uint64]bool{}
	anchors := map[uint64]tickAnchor{}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for _, sc := range n.cfg.Shards {
			st := n.byID[sc.ShardID]
			id, _, valid, err := n.nh.GetLeaderID(sc.ShardID)
			leader := err == nil && valid && id == n.cfg.NodeID
			renew := leader && !wasLeader[sc.ShardID]
			wasLeader[sc.ShardID] = leader
			if !leader {
				delete(anchors, sc.ShardID)
				continue
			}
			if _, ok := anchors[sc.ShardID]; !ok {
				// New leadership: anchor the session time to the session
				// clock as this replica knows it.
				var v any
				var err error
				n.nhCall(func() { v, err = n.nh.StaleRead(sc.ShardID, sessionDueQuery{Now: 0}) })
				if err != nil {
					wasLeader[sc.ShardID] = false
					continue
				}
				anchors[sc.ShardID] = tickAnchor{clock: v.(sessionDueResult).Clock, mono: time.Now()}
			}
			now := n.tickTime(anchors[sc.ShardID])
			if !renew {
				var v any
				var err error
				n.nhCall(func() { v, err = n.nh.StaleRead(sc.ShardID, sessionDueQuery{Now: now}) })
				if err != nil {
					continue
				}
				due := v.(sessionDueResult)
				// Refresh the session clock while sessions exist, so that it
				// is never more than MaxClockSkew/2 (plus a tick) behind:
				// other commands' times are bounded by it.
				stale := due.Sessions > 0 && now-due.Clock >= int64(n.cfg.MaxClockSkew/2)
				if !due.Due && !stale {
					continue
				}
			}
			pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			res, err := st.propose(pctx, command{Type: cmdTick, Now: now, Renew: renew, MaxSkew: int64(n.cfg.MaxClockSkew)}, false)
			cancel()
			if err != nil {
				wasLeader[sc.ShardID] = false // retry the renewal next tick
				n.log.Debug("session tick failed", "shard", sc.Name, "err", err)
				continue
			}
			if anchors[sc.ShardID].clock == 0 {
				// The first session clock of the shard: anchor to it.
				anchors[sc.ShardID] = tickAnchor{clock: now, mono: time.Now()}
			}
			if res.Expired > 0 {
				n.metrics.sessionExpiries.WithLabelValues(sc.Name).Add(float64(res.Expired))
				n.log.Info("sessions expired", "shard", sc.Name, "count", res.Expired)
			}
		}
	}
}

// tickAnchor is the session clock as a shard leader found it when its
// leadership began, and the monotonic time then.
type tickAnchor struct {
	clock int64 // Unix ns; 0: no session clock yet
	mono  time.Time
}

// tickTime is the time a leader proposes in its ticks, which moves the
// session clock. It is the node's wall clock, kept within [est, est +
// MaxClockSkew] where est is the anchor's session clock advanced by the
// monotonic time elapsed since: a leader whose wall clock jumps back still
// advances the session clock at the real rate (before, sessions of dead
// processes stopped expiring for as long as the jump), and one whose clock
// jumps ahead cannot move it more than MaxClockSkew ahead (before, every
// session of the shard expired at once). A skew present when the
// leadership began is corrected only by the next leader.
func (n *Node) tickTime(a tickAnchor) int64 {
	wall := n.clock.Now().UnixNano()
	if a.clock == 0 {
		return wall
	}
	est := a.clock + int64(time.Since(a.mono))
	return min(max(wall, est), est+int64(n.cfg.MaxClockSkew))
}

// nhCall runs f, a NodeHost call that reaches a state machine (reads,
// proposals), while the NodeHost cannot be closed.
func (n *Node) nhCall(f func()) {
	n.nhMu.RLock()
	defer n.nhMu.RUnlock()
	f()
}
