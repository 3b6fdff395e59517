package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
	"github.com/meridianmq/meridian/internal/grpcbuf"
	"github.com/meridianmq/meridian/internal/netguard"
	"github.com/meridianmq/meridian/metadata"
	"github.com/meridianmq/meridian/security"
	"google.golang.org/grpc"
	"google.golang.org/grpc/experimental"
	"google.golang.org/grpc/reflection"
)

// ownerRecord is the value of an ownership claim and of a broker
// registration.
type ownerRecord struct {
	BrokerID string `json:"broker_id"`
	GRPC     string `json:"grpc"`
	HTTP     string `json:"http"`
}

// topicSlot is a topic being loaded or loaded.
type topicSlot struct {
	t     *topic
	ready chan struct{}
	err   error
}

// Server is one broker: the client and admin gRPC services, the HTTP
// endpoints, and the topics it owns.
type Server struct {
	cfg     Config
	log     *slog.Logger
	metrics *metrics
	// guard counts connections refused by the per-IP limit.
	guard *netguard.Metrics
	repl  *replManager
	// vlim bounds acknowledgement vectors (cfg.Subscriptions).
	vlim *vecLimits
	// sendBytes and sendConns bound produce bytes without a receipt, per
	// broker and per connection (sendbudget.go).
	sendBytes *byteBudget
	sendConns connBudgets
	// deliveryBytes and deliveryConns bound the bytes queued towards
	// consumers' streams, per broker and per connection (deliverybudget.go).
	deliveryBytes *byteBudget
	deliveryConns connBudgets
	// dispatchReads bounds the dispatch reads in flight (readbudget.go).
	dispatchReads *byteBudget
	// sched runs every loaded topic's periodic work (timerwheel.go).
	sched *topicSched

	grpcSrv *grpc.Server
	lis     net.Listener
	httpSrv *http.Server
	httpLis net.Listener
	self    ownerRecord
	// sec is the broker's security runtime (never nil; security off when
	// not configured); ownSec: built by NewServer, closed by Stop/Kill.
	sec    *security.Runtime
	ownSec bool
	// wan is the WAN membership pool (nil without Config.WAN); set by Start.
	wan *WANPool

	// cacheBytes is the tail cache held by all topics (Config.TailCacheBytes).
	cacheBytes atomic.Int64

	// beforeTopicDelete, set only by tests (export_test.go), runs in
	// DeleteTopic between the unload and the guarded delete.
	beforeTopicDelete atomic.Pointer[func()]

	ready    atomic.Bool
	zombie   atomic.Bool
	stopOnce sync.Once
	bgCancel context.CancelFunc
	bgDone   chan struct{}
	// takeWarn rate-limits "taking the topic" warnings (one per 10s).
	takeWarn warnEvery
	// policies mirrors the global shard's policies (policycache.go);
	// policyDone is closed when its goroutines have exited.
	policies *policyCache
	// failoverConfirms: GetFailoverTarget's reads of the global shard.
	failoverConfirms failoverConfirms
	policyDone       chan struct{}
	// replLag reports replication lag per region (regionlist.go).
	replLag atomic.Pointer[ReplicationLagFunc]
	// probes remembers remote regions' last answers (regionlist.go).
	probes regionProbes

	// mu guards the fields below.
	mu       sync.Mutex
	topics   map[string]*topicSlot
	session  metadata.SessionID
	stopping bool
	peers    map[string]*grpc.ClientConn
	// loadCache is the last broker-load census (see brokerLoad).
	loadCache struct {
		at      time.Time
		brokers map[string]ownerRecord
		load    map[string]int
		// refreshing is closed when the census running now ends; nil
		// when none runs.
		refreshing chan struct{}
	}
}

// NewServer validates cfg and builds a broker; Start makes it serve.
func NewServer(cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	cfg.Subscriptions = cfg.Subscriptions.withDefaults()
	if cfg.UnsafeSkipOriginCheck {
		cfg.Logger.Warn("UNSAFE TEST MODE unsafe_skip_origin_check: replicated entries resent after a reconnect are stored twice; never use it outside a chaos test")
	}
	s := &Server{cfg: cfg, topics: map[string]*topicSlot{}, peers: map[string]*grpc.ClientConn{}, bgDone: make(chan struct{}),
		takeWarn: warnEvery{interval: 10 * time.Second}, sched: newTopicSched(), vlim: cfg.Subscriptions.vecLimits(),
		failoverConfirms: failoverConfirms{limit: cfg.MaxFailoverConfirmBytes},
		sendBytes:        newByteBudget(cfg.MaxInflightProduceBytes), sendConns: connBudgets{limit: cfg.MaxInflightBytesPerConnection},
		deliveryBytes: newByteBudget(cfg.MaxPendingDeliveryBytes), deliveryConns: connBudgets{limit: cfg.MaxPendingDeliveryBytesPerConnection},
		dispatchReads: newByteBudget(cfg.MaxInflightDispatchReadBytes)}
	m, err := newMetrics(cfg.Registerer, s)
	if err != nil {
		return nil, err
	}
	s.metrics = m
	if s.guard, err = netguard.NewMetrics(cfg.Registerer, "broker"); err != nil {
		return nil, err
	}
	s.sec = cfg.SecurityRuntime
	if s.sec == nil {
		if s.sec, err = security.NewRuntime(cfg.Security, cfg.Logger.With("component", "security")); err != nil {
			return nil, fmt.Errorf("broker: security: %w", err)
		}
		s.ownSec = true
	}
	if err := s.sec.Register(cfg.Registerer, "broker"); err != nil {
		s.closeSec()
		return nil, err
	}
	if err := s.sec.CheckCertificateRole("broker.security.tls.cert_file", security.KindBroker, cfg.Region); err != nil {
		s.closeSec()
		return nil, err
	}
	pc, err := newPolicyCache(cfg.Global, cfg.Logger, cfg.Registerer, s.policyChanged)
	if err != nil {
		s.closeSec()
		return nil, err
	}
	s.policies = pc
	if s.repl, err = newReplManager(s); err != nil {
		s.closeSec()
		return nil, err
	}
	return s, nil
}

// closeSec closes the security runtime if the broker built it.
func (s *Server) closeSec() {
	if s.ownSec {
		_ = s.sec.Close()
	}
}

// checkExposure refuses listen addresses reachable from other hosts
// without TLS and auth (security.CheckExposure).
func (s *Server) checkExposure() error {
	sc := s.sec.Config()
	if err := security.CheckExposure("broker.grpc_address", s.cfg.GRPCAddress, sc, s.cfg.Logger); err != nil {
		return err
	}
	return security.CheckExposure("broker.http_address", s.cfg.HTTPAddress, sc, s.cfg.Logger)
}

// Start listens, registers the broker in the region and serves until Stop.
func (s *Server) Start(ctx context.Context) error {
	err := s.start(ctx)
	if err != nil {
		s.closeSec() // the server is not used again after a failed start
	}
	return err
}

func (s *Server) start(ctx context.Context) error {
	if err := s.checkExposure(); err != nil {
		return err
	}
	lis := s.cfg.GRPCListener
	var err error
	if lis == nil {
		if lis, err = net.Listen("tcp", s.cfg.GRPCAddress); err != nil {
			return fmt.Errorf("broker: listen grpc %s: %w", s.cfg.GRPCAddress, err)
		}
	}
	lis = netguard.LimitPerIP(lis, s.cfg.MaxConnectionsPerIP, s.guard.RefusedPerIP("grpc"))
	s.lis = lis
	s.self.GRPC = lis.Addr().String()
	if s.cfg.AdvertisedGRPC != "" {
		s.self.GRPC = s.cfg.AdvertisedGRPC
	}
	if s.cfg.HTTPAddress != "" {
		hl, err := net.Listen("tcp", s.cfg.HTTPAddress)
		if err != nil {
			lis.Close()
			return fmt.Errorf("broker: listen http %s: %w", s.cfg.HTTPAddress, err)
		}
		s.httpLis = netguard.LimitPerIP(hl, s.cfg.MaxConnectionsPerIP, s.guard.RefusedPerIP("http"))
		s.self.HTTP = hl.Addr().String()
		if s.cfg.AdvertisedHTTP != "" {
			s.self.HTTP = s.cfg.AdvertisedHTTP
		}
	}
	if s.cfg.BrokerID == "" {
		s.cfg.BrokerID = s.self.GRPC
	}
	s.self.BrokerID = s.cfg.BrokerID
	s.log = s.cfg.Logger.With("broker", s.cfg.BrokerID)

	if err := s.startWAN(); err != nil {
		lis.Close()
		if s.httpLis != nil {
			s.httpLis.Close()
		}
		return err
	}
	if err := s.register(ctx); err != nil {
		lis.Close()
		if s.httpLis != nil {
			s.httpLis.Close()
		}
		s.stopWAN(ctx, false)
		return err
	}
	srvOpts := append(s.cfg.GRPCServerOptions(s.cfg.MaxMessageBytes+1<<20,
		netguard.Keepalive{Time: s.cfg.KeepaliveTime, Timeout: s.cfg.KeepaliveTimeout, MinTime: s.cfg.KeepaliveMinTime}),
		// Batches of 32 KiB–1 MiB would each zero a 1 MiB buffer in
		// gRPC's default pool.
		experimental.BufferPool(grpcbuf.Pool()), grpc.ForceServerCodecV2(grpcbuf.Codec()))
	if w := s.cfg.grpcWindow(); w > 0 {
		srvOpts = append(srvOpts, grpc.InitialWindowSize(w), grpc.InitialConnWindowSize(w))
	}
	// Authentication and the method-level rules (authz.go), then the rules
	// that read the request.
	srvOpts = append(srvOpts, s.sec.ServerOptions(s)...)
	srvOpts = append(srvOpts, s.authzServerOptions()...)
	s.grpcSrv = grpc.NewServer(srvOpts...)
	clientv1.RegisterMeridianServer(s.grpcSrv, &clientService{b: s})
	clientv1.RegisterAdminServer(s.grpcSrv, &adminService{b: s})
	clientv1.RegisterReplicationServer(s.grpcSrv, newReplicationService(s))
	reflection.Register(s.grpcSrv)
	go func() { _ = s.grpcSrv.Serve(lis) }()
	if s.httpLis != nil {
		// Health probes stay open: a kubelet cannot present a token.
		s.httpSrv = s.cfg.HTTPServer(s.sec.HTTPHandler(s.httpHandler(), "/healthz", "/readyz"),
			slog.NewLogLogger(s.log.Handler(), slog.LevelDebug))
		hl := s.sec.HTTPListener(s.httpLis)
		go func() { _ = s.httpSrv.Serve(hl) }()
	}
	rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
	err = s.registerRegion(rctx)
	rcancel()
	if err != nil {
		s.log.Warn("region registry in the global shard not updated; other regions may not find this broker", "err", err)
	}
	bg, cancel := context.WithCancel(context.Background())
	s.bgCancel = cancel
	go s.keepAlive(bg)
	s.policyDone = make(chan struct{})
	go func() { defer close(s.policyDone); s.policies.run(bg) }()
	s.repl.start()
	s.warnNoSpareBookie(ctx)
	s.ready.Store(true)
	s.log.Info("broker started", "grpc", s.self.GRPC, "http", s.self.HTTP)
	return nil
}

// register opens a metadata session and records the broker as live.
func (s *Server) register(ctx context.Context) error {
	sid, err := s.cfg.Regional.CreateSession(ctx, s.cfg.SessionTTL)
	if err != nil {
		return fmt.Errorf("broker: create metadata session: %w", err)
	}
	val, _ := json.Marshal(s.self)
	if _, err := s.cfg.Regional.Put(ctx, brokerPrefix+s.cfg.BrokerID, val, metadata.AnyVersion, sid); err != nil {
		return fmt.Errorf("broker: register: %w", err)
	}
	s.mu.Lock()
	s.session = sid
	s.mu.Unlock()
	return nil
}

// keepAlive keeps the session alive. When the session expired, the broker
// lost every ownership claim: it drops its topics (their new owners fence
// the ledgers anyway) and registers again.
func (s *Server) keepAlive(ctx context.Context) {
	defer close(s.bgDone)
	tick := time.NewTicker(s.cfg.SessionTTL / 4)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		s.cfg.Testing.KeepAliveFreeze.wait(ctx.Done())
		if s.zombie.Load() {
			continue
		}
		s.mu.Lock()
		sid := s.session
		s.mu.Unlock()
		kctx, cancel := context.WithTimeout(ctx, s.cfg.SessionTTL/2)
		err := s.cfg.Regional.KeepAlive(kctx, sid)
		cancel()
		if err == nil {
			s.ready.Store(true)
			continue
		}
		if !errors.Is(err, metadata.ErrSessionExpired) {
			s.log.Warn("session keep-alive failed", "err", err)
			continue
		}
		s.log.Warn("metadata session expired: dropping owned topics")
		s.ready.Store(false)
		s.unloadAll(ctx, false)
		rctx, cancel := context.WithTimeout(ctx, s.cfg.OperationTimeout)
		if err := s.register(rctx); err != nil {
			s.log.Error("re-register", "err", err)
		}
		cancel()
	}
}

// SuspendSessionForTesting stops session keep-alives and makes the broker
// ignore the expiry: it turns into a "zombie" that still believes it owns
// its topics. Tests use it to check fencing; never call it otherwise.
func (s *Server) SuspendSessionForTesting() { s.zombie.Store(true) }

// Addr returns the gRPC address clients use.
func (s *Server) Addr() string { return s.self.GRPC }

// HTTPAddr returns the HTTP address ("" without HTTP).
func (s *Server) HTTPAddr() string { return s.self.HTTP }

// ID returns the broker ID.
func (s *Server) ID() string { return s.cfg.BrokerID }

// Ready reports whether the broker can take writes.
func (s *Server) Ready() bool { return s.ready.Load() }

// OwnedTopics lists the topics this broker serves now.
func (s *Server) OwnedTopics() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.topics))
	for k, sl := range s.topics {
		if sl.t != nil && sl.err == nil {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

// Stop stops accepting, flushes and closes the owned topics' ledgers,
// persists cursors and releases ownership, then stops the servers.
func (s *Server) Stop(ctx context.Context) error {
	s.stopOnce.Do(func() {
		s.mu.Lock()
		s.stopping = true
		s.mu.Unlock()
		s.ready.Store(false)
		s.repl.stop()
		s.unloadAll(ctx, true)
		s.sched.close()
		s.stopWAN(ctx, true)
		s.repl.closePool()
		if s.bgCancel != nil {
			s.bgCancel()
			<-s.bgDone
			<-s.policyDone
		}
		s.mu.Lock()
		sid := s.session
		peers := s.peers
		s.peers = map[string]*grpc.ClientConn{}
		s.mu.Unlock()
		if sid != 0 {
			_ = s.cfg.Regional.CloseSession(ctx, sid)
		}
		for _, c := range peers {
			c.Close()
		}
		if s.grpcSrv != nil {
			done := make(chan struct{})
			go func() { s.grpcSrv.GracefulStop(); close(done) }()
			select {
			case <-done:
			case <-ctx.Done():
				s.grpcSrv.Stop()
			case <-time.After(5 * time.Second):
				s.grpcSrv.Stop()
			}
		}
		if s.httpSrv != nil {
			_ = s.httpSrv.Close()
		}
		s.closeSec()
		s.log.Info("broker stopped")
	})
	return nil
}

// Kill stops the broker abruptly, as a crash would: no ledger is closed,
// no cursor persisted, no ownership released (the session expires).
func (s *Server) Kill() {
	s.stopOnce.Do(func() {
		s.mu.Lock()
		s.stopping = true
		s.mu.Unlock()
		s.ready.Store(false)
		s.zombie.Store(true)
		s.stopWAN(context.Background(), false)
		s.repl.stop()
		defer s.repl.closePool()
		if s.grpcSrv != nil {
			s.grpcSrv.Stop()
		}
		if s.httpSrv != nil {
			_ = s.httpSrv.Close()
		}
		if s.bgCancel != nil {
			s.bgCancel()
			<-s.bgDone
			<-s.policyDone
		}
		// Stop background work without writing anything.
		s.mu.Lock()
		slots := s.topics
		s.topics = map[string]*topicSlot{}
		s.mu.Unlock()
		for _, sl := range slots {
			<-sl.ready
			if sl.t != nil && sl.err == nil {
				sl.t.killed.Store(true)
				sl.t.close(context.Background(), false)
			}
		}
		s.sched.close()
		s.closeSec()
	})
}

func (s *Server) unloadAll(ctx context.Context, graceful bool) {
	s.mu.Lock()
	var ts []*topic
	for _, sl := range s.topics {
		select {
		case <-sl.ready:
			if sl.t != nil && sl.err == nil {
				ts = append(ts, sl.t)
			}
		default:
		}
	}
	s.mu.Unlock()
	var wg sync.WaitGroup
	for _, t := range ts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.unloadTopicCtx(ctx, t, graceful, nil)
		}()
	}
	wg.Wait()
}

// unloadTopic removes t from this broker. graceful closes the ledger and
// persists cursors; ownership is released unless another broker holds it.
func (s *Server) unloadTopic(t *topic, graceful bool, cause error) {
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.OperationTimeout)
	defer cancel()
	s.unloadTopicCtx(ctx, t, graceful, cause)
}

func (s *Server) unloadTopicCtx(ctx context.Context, t *topic, graceful bool, cause error) {
	key := t.name.String()
	s.mu.Lock()
	sl, ok := s.topics[key]
	if !ok || sl.t != t {
		s.mu.Unlock()
		return
	}
	// Until the topic is closed and released, requests for it wait and
	// then retry: a reload must not race the closing instance.
	us := &topicSlot{ready: make(chan struct{}), err: errUnloading}
	s.topics[key] = us
	sid := s.session
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		if s.topics[key] == us {
			delete(s.topics, key)
		}
		close(us.ready)
		s.mu.Unlock()
	}()
	if cause != nil {
		s.log.Warn("unloading topic", "topic", key, "cause", cause)
	}
	t.close(ctx, graceful)
	if t.killed.Load() {
		return
	}
	s.releaseOwnership(ctx, key, sid)
	s.metrics.topicsOwned.Dec()
}

// errUnloading marks a topic slot whose topic is being unloaded.
var errUnloading = errors.New("broker: topic is being unloaded")

// releaseOwnership deletes the claim if it is still ours.
func (s *Server) releaseOwnership(ctx context.Context, topic string, sid metadata.SessionID) {
	kv, err := s.cfg.Regional.Get(ctx, ownerPrefix+topic, metadata.ReadOptions{})
	if err != nil {
		return
	}
	if kv.Session != sid {
		return
	}
	_ = s.cfg.Regional.Delete(ctx, ownerPrefix+topic, kv.Version)
}

// getTopic returns the loaded topic, claiming and loading it when nobody
// owns it. It fails with a notOwnedError naming the owner otherwise.
func (s *Server) getTopic(ctx context.Context, name TopicName, create bool) (*topic, error) {
	key := name.String()
	for {
		s.mu.Lock()
		if s.stopping {
			s.mu.Unlock()
			return nil, ErrServerStopping
		}
		if sl, ok := s.topics[key]; ok {
			s.mu.Unlock()
			select {
			case <-sl.ready:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			if errors.Is(sl.err, errUnloading) {
				continue // closed now: claim it again
			}
			if sl.err != nil {
				return nil, sl.err
			}
			return sl.t, nil
		}
		sl := &topicSlot{ready: make(chan struct{})}
		s.topics[key] = sl
		sid := s.session
		s.mu.Unlock()
		t, err := s.claimAndLoad(ctx, name, create, sid)
		s.mu.Lock()
		sl.t, sl.err = t, err
		if err != nil {
			delete(s.topics, key)
		}
		close(sl.ready)
		s.mu.Unlock()
		if err != nil {
			return nil, err
		}
		s.metrics.topicsOwned.Inc()
		s.repl.topicLoaded(t)
		return t, nil
	}
}

func (s *Server) claimAndLoad(ctx context.Context, name TopicName, create bool, sid metadata.SessionID) (*topic, error) {
	if s.zombie.Load() {
		return nil, fmt.Errorf("%w: broker session suspended", ErrUnavailable)
	}
	pol, err := s.effectivePolicies(ctx, name)
	if err != nil {
		return nil, err
	}
	if !create {
		if _, err := s.cfg.Regional.Get(ctx, managedLedgerPrefix+name.String(), metadata.ReadOptions{}); err != nil {
			if errors.Is(err, metadata.ErrNotFound) {
				return nil, fmt.Errorf("%w: topic %s", ErrNotFound, name)
			}
			return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
		}
	}
	okey := ownerPrefix + name.String()
	val, _ := json.Marshal(s.self)
	kv, err := s.cfg.Regional.Get(ctx, okey, metadata.ReadOptions{})
	switch {
	case err == nil && kv.Session == sid:
		// Our own claim from before an unload that could not delete it.
	case err == nil && !s.ownRecord(kv.Value):
		return nil, s.notOwned(kv.Value)
	case err == nil || errors.Is(err, metadata.ErrNotFound):
		if err == nil {
			// A claim by this broker ID from an earlier session: this
			// process restarted (or its session expired and it dropped its
			// topics). Take it back now instead of waiting for the expiry;
			// the ledger recovery below fences any writer still around.
			if derr := s.cfg.Regional.Delete(ctx, okey, kv.Version); derr != nil && !errors.Is(derr, metadata.ErrNotFound) {
				return nil, fmt.Errorf("%w: release stale claim on %s: %v", ErrUnavailable, name, derr)
			}
		}
		if _, err := createKey(ctx, s.cfg.Regional, okey, val, sid); err != nil {
			if errors.Is(err, metadata.ErrVersionMismatch) {
				kv, gerr := s.cfg.Regional.Get(ctx, okey, metadata.ReadOptions{})
				if gerr == nil {
					return nil, s.notOwned(kv.Value)
				}
			}
			return nil, fmt.Errorf("%w: claim topic %s: %v", ErrUnavailable, name, err)
		}
	default:
		return nil, fmt.Errorf("%w: read owner of %s: %v", ErrUnavailable, name, err)
	}
	t := newTopic(s, name, pol)
	lctx, cancel := context.WithTimeout(ctx, s.cfg.OperationTimeout)
	defer cancel()
	if err := t.load(lctx, true); err != nil {
		// Release the claim (ours, new or from before) so another try or
		// another broker can take the topic.
		s.releaseOwnership(context.Background(), name.String(), sid)
		return nil, err
	}
	return t, nil
}

// ownRecord reports whether an ownership record names this broker ID.
func (s *Server) ownRecord(val []byte) bool {
	var o ownerRecord
	return json.Unmarshal(val, &o) == nil && o.BrokerID == s.cfg.BrokerID
}

func (s *Server) notOwned(val []byte) error {
	var o ownerRecord
	_ = json.Unmarshal(val, &o)
	if o.BrokerID == s.cfg.BrokerID {
		// A claim of ours from an expired session: it will vanish.
		return fmt.Errorf("%w: previous ownership of this broker is expiring; retry", ErrUnavailable)
	}
	return &notOwnedError{owner: o.GRPC}
}

// lookup answers which broker owns the topic, assigning one if none does.
func (s *Server) lookup(ctx context.Context, name TopicName, authoritative bool) (ownerRecord, error) {
	if _, err := s.getPolicies(ctx, name.NamespaceName()); err != nil {
		return ownerRecord{}, err
	}
	s.mu.Lock()
	sl, loaded := s.topics[name.String()]
	s.mu.Unlock()
	if loaded {
		<-sl.ready
		if sl.err == nil {
			return s.self, nil
		}
	}
	kv, err := s.cfg.Regional.Get(ctx, ownerPrefix+name.String(), metadata.ReadOptions{})
	if err == nil {
		var o ownerRecord
		if json.Unmarshal(kv.Value, &o) == nil && o.BrokerID != s.cfg.BrokerID {
			return o, nil
		}
	} else if !errors.Is(err, metadata.ErrNotFound) {
		return ownerRecord{}, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	if !authoritative && err != nil {
		target, terr := s.chooseBroker(ctx, name)
		if terr == nil && target.BrokerID != s.cfg.BrokerID {
			o, ferr := s.forwardLookup(ctx, target, name)
			if ferr == nil {
				return o, nil
			}
			s.takeWarn.warn(s.log, "forwarded lookup failed; taking the topic", "target", target.BrokerID, "topic", name.String(), "err", ferr)
		}
	}
	if _, err := s.getTopic(ctx, name, true); err != nil {
		var no *notOwnedError
		if errors.As(err, &no) {
			return ownerRecord{GRPC: no.owner}, nil
		}
		return ownerRecord{}, err
	}
	return s.self, nil
}

// chooseBroker picks the live broker owning the fewest topics (ties broken
// by a hash of the topic name so equal brokers share new topics).
func (s *Server) chooseBroker(ctx context.Context, name TopicName) (ownerRecord, error) {
	brokers, load, err := s.brokerLoad(ctx)
	if err != nil {
		return ownerRecord{}, err
	}
	if len(brokers) == 0 {
		return s.self, nil
	}
	ids := make([]string, 0, len(brokers))
	for id := range brokers {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	least := -1
	var cands []string
	for _, id := range ids {
		switch n := load[id]; {
		case least < 0 || n < least:
			least, cands = n, []string{id}
		case n == least:
			cands = append(cands, id)
		}
	}
	h := fnv.New32a()
	h.Write([]byte(name.String()))
	chosen := cands[int(h.Sum32())%len(cands)]
	s.mu.Lock()
	if s.loadCache.load != nil {
		s.loadCache.load[chosen]++ // count it until the next refresh
	}
	s.mu.Unlock()
	return brokers[chosen], nil
}

// loadCacheTTL bounds how stale the broker load used for assignment is:
// counting every ownership key on each new topic would be O(topics).
const loadCacheTTL = time.Second

// brokerLoad returns the live brokers and how many topics each owns,
// cached for loadCacheTTL.
//
// One census runs at a time: it lists every ownership key (O(topics)), and
// when every caller whose cache had expired ran its own — 64 topic
// creations in flight each listing 20 000 owner records every second — the
// census was most of the broker's CPU and topic creation slowed ~8× past
// 10 000 topics (docs/parts/scale2.md). While one runs, the others use the
// previous (stale) census if there is one, else wait for it.
func (s *Server) brokerLoad(ctx context.Context) (map[string]ownerRecord, map[string]int, error) {
	for {
		s.mu.Lock()
		lc := &s.loadCache
		if lc.load != nil && (time.Since(lc.at) < loadCacheTTL || lc.refreshing != nil) {
			b, l := maps.Clone(lc.brokers), maps.Clone(lc.load)
			s.mu.Unlock()
			return b, l, nil
		}
		if ch := lc.refreshing; ch != nil {
			s.mu.Unlock()
			select {
			case <-ch:
				continue
			case <-ctx.Done():
				return nil, nil, fmt.Errorf("%w: broker load: %v", ErrUnavailable, ctx.Err())
			}
		}
		ch := make(chan struct{})
		lc.refreshing = ch
		s.mu.Unlock()
		brokers, load, err := s.brokerCensus(ctx)
		s.mu.Lock()
		if err == nil {
			lc.at, lc.brokers, lc.load = time.Now(), brokers, maps.Clone(load)
		}
		lc.refreshing = nil
		close(ch)
		s.mu.Unlock()
		return brokers, load, err
	}
}

// brokerCensus lists the live brokers and counts the topics each owns.
func (s *Server) brokerCensus(ctx context.Context) (map[string]ownerRecord, map[string]int, error) {
	brokers := map[string]ownerRecord{}
	if err := s.listAll(ctx, brokerPrefix, func(kv metadata.KV) {
		var o ownerRecord
		if json.Unmarshal(kv.Value, &o) == nil {
			brokers[o.BrokerID] = o
		}
	}); err != nil {
		return nil, nil, err
	}
	load := map[string]int{}
	if err := s.listAll(ctx, ownerPrefix, func(kv metadata.KV) {
		var o ownerRecord
		if json.Unmarshal(kv.Value, &o) == nil {
			load[o.BrokerID]++
		}
	}); err != nil {
		return nil, nil, err
	}
	return brokers, load, nil
}

func (s *Server) listAll(ctx context.Context, prefix string, fn func(metadata.KV)) error {
	page := metadata.Page{}
	for i := 0; i < 1000; i++ {
		res, err := s.cfg.Regional.List(ctx, prefix, page, metadata.ReadOptions{})
		if err != nil {
			return fmt.Errorf("%w: list %s: %v", ErrUnavailable, prefix, err)
		}
		for _, kv := range res.KVs {
			fn(kv)
		}
		if !res.More || len(res.KVs) == 0 {
			return nil
		}
		page.After = res.KVs[len(res.KVs)-1].Key
	}
	return nil
}

func (s *Server) peer(addr string) (*grpc.ClientConn, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c, ok := s.peers[addr]; ok {
		return c, nil
	}
	c, err := grpc.NewClient(s.dialAddr(addr), s.sec.DialOptions(security.ServerNameOf(addr))...)
	if err != nil {
		return nil, err
	}
	s.peers[addr] = c
	return c, nil
}

func (s *Server) forwardLookup(ctx context.Context, target ownerRecord, name TopicName) (ownerRecord, error) {
	c, err := s.peer(target.GRPC)
	if err != nil {
		return ownerRecord{}, err
	}
	fctx, cancel := context.WithTimeout(ctx, s.cfg.OperationTimeout)
	defer cancel()
	resp, err := clientv1.NewMeridianClient(c).Lookup(fctx, &clientv1.LookupRequest{Topic: name.String(), Authoritative: true})
	if err != nil {
		return ownerRecord{}, FromGRPC(err)
	}
	return ownerRecord{BrokerID: resp.BrokerId, GRPC: resp.BrokerUrl, HTTP: resp.HttpUrl}, nil
}

// loadedTopics returns the topics loaded on this broker.
func (s *Server) loadedTopics() []*topic {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*topic, 0, len(s.topics))
	for _, sl := range s.topics {
		select {
		case <-sl.ready:
			if sl.err == nil && sl.t != nil {
				out = append(out, sl.t)
			}
		default:
		}
	}
	return out
}
