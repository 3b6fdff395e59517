package bookie

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	bookiev1 "github.com/meridianmq/meridian/api/bookie/v1"
	"github.com/meridianmq/meridian/internal/faultfs"
	"github.com/meridianmq/meridian/internal/netguard"
	"github.com/meridianmq/meridian/security"
	"github.com/meridianmq/meridian/topology"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/experimental"
	"google.golang.org/grpc/test/bufconn"
)

// Server is one bookie: storage engine, gRPC service, HTTP endpoints
// (/metrics, /healthz, /readyz), background checkpoint/GC/disk checks and,
// when Config.Metadata is set, registration in the bookie registry.
type Server struct {
	cfg     Config
	log     *slog.Logger
	fs      faultfs.FS
	reg     prometheus.Registerer
	gather  prometheus.Gatherer
	metrics *metrics
	idm     *identityMetrics
	// guard counts connections refused by the per-IP limit.
	guard *netguard.Metrics

	// cookie is the identity checked at Start (owned by watchLimbo once
	// started); instanceID is its InstanceID, fixed after Start.
	cookie     Cookie
	instanceID string
	// limboBelow > 0: in limbo for ledgers with a smaller ID (limbo.go).
	limboBelow atomic.Int64

	mu       sync.Mutex // guards the fields below
	started  bool
	stopped  bool
	st       *storage
	grpc     *grpc.Server
	lis      net.Listener
	inproc   *bufconn.Listener // InProcess: the in-memory listener
	httpSrv  *http.Server
	httpLis  net.Listener
	cancel   context.CancelFunc
	bg       sync.WaitGroup
	regState *registration
	members  *topology.Membership
	// sec is the security runtime (never nil after NewServer); ownSec:
	// built by NewServer, closed when the server stops.
	sec    *security.Runtime
	ownSec bool

	scrubSem chan struct{} // one scrub at a time
}

// NewServer validates cfg and builds a Server; nothing touches disk or the
// network until Start.
func NewServer(cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, log: cfg.Logger, fs: cfg.Testing.FS, reg: cfg.Registerer, gather: cfg.Gatherer, scrubSem: make(chan struct{}, 1)}
	if s.log == nil {
		s.log = slog.Default()
	}
	s.log = s.log.With("bookie", cfg.ID)
	if s.fs == nil {
		s.fs = faultfs.OS{}
	}
	if s.reg == nil {
		r := prometheus.NewRegistry()
		s.reg = r
		if s.gather == nil {
			s.gather = r
		}
	} else if s.gather == nil {
		if g, ok := s.reg.(prometheus.Gatherer); ok {
			s.gather = g
		}
	}
	m, err := newMetrics(s.reg)
	if err != nil {
		return nil, fmt.Errorf("bookie: register metrics: %w", err)
	}
	s.metrics = m
	if s.idm, err = newIdentityMetrics(s.reg); err != nil {
		return nil, fmt.Errorf("bookie: register metrics: %w", err)
	}
	if s.guard, err = netguard.NewMetrics(s.reg, "bookie"); err != nil {
		return nil, fmt.Errorf("bookie: register metrics: %w", err)
	}
	s.sec = cfg.SecurityRuntime
	if s.sec == nil {
		if s.sec, err = security.NewRuntime(cfg.Security, s.log.With("component", "security")); err != nil {
			return nil, fmt.Errorf("bookie: security: %w", err)
		}
		s.ownSec = true
	}
	if err := s.sec.Register(s.reg, "bookie"); err != nil {
		s.closeSec()
		return nil, fmt.Errorf("bookie: register metrics: %w", err)
	}
	if err := s.sec.CheckCertificateRole("security.tls.cert_file", security.KindBookie, cfg.Region); err != nil {
		s.closeSec()
		return nil, fmt.Errorf("bookie: %w", err)
	}
	return s, nil
}

// closeSec closes the security runtime if the bookie built it.
func (s *Server) closeSec() {
	if s.ownSec {
		_ = s.sec.Close()
	}
}

// Start recovers the storage (replaying the journal), then serves gRPC and
// HTTP and starts the background work. ctx bounds only the start-up.
func (s *Server) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started {
		return errors.New("bookie: server already started")
	}
	s.started = true
	if s.cfg.Testing.UnsafeAckBeforeSync {
		s.log.Warn("UNSAFE TEST MODE unsafe_ack_before_sync: adds are acknowledged before their fsync; a power loss loses acknowledged entries. Never use outside chaos tests.")
	}
	err := s.startLocked(ctx)
	if err != nil {
		// Everything started so far was undone; the server cannot be reused.
		s.stopped = true
		s.closeSec()
	}
	return err
}

func (s *Server) startLocked(ctx context.Context) error {
	sc := s.sec.Config()
	if err := security.CheckExposure("bookie.listen_addr", s.cfg.ListenAddr, sc, s.log); err != nil {
		return err
	}
	if err := security.CheckExposure("bookie.http_addr", s.cfg.HTTPAddr, sc, s.log); err != nil {
		return err
	}
	// The identity first: a bookie whose directories were wiped or swapped
	// must not serve (not even "not found").
	cookie, err := checkCookies(ctx, s.cfg, s.fs, s.log)
	if err != nil {
		return err
	}
	s.cookie, s.instanceID = cookie, cookie.InstanceID
	s.limboBelow.Store(cookie.LimboBelowLedger)
	if cookie.LimboBelowLedger > 0 {
		s.idm.limbo.Set(1)
		s.log.Warn("bookie in limbo after a re-format: ledgers below the limit answer \"ledger unknown\" until autorecovery moved them",
			"limbo_below_ledger", cookie.LimboBelowLedger, "instance", cookie.InstanceID)
	}
	st, err := openStorage(s.cfg, s.fs, s.log, s.metrics)
	if err != nil {
		return err
	}
	s.st = st
	st.checkDisk()
	lis, err := net.Listen("tcp", s.cfg.ListenAddr)
	if err != nil {
		st.close(true)
		return fmt.Errorf("bookie: listen %s: %w", s.cfg.ListenAddr, err)
	}
	lis = netguard.LimitPerIP(lis, s.cfg.MaxConnectionsPerIP, s.guard.RefusedPerIP("grpc"))
	s.lis = lis
	// One entry up to MaxEntryBytes, or a batch up to MaxAddBatchBytes,
	// plus protobuf framing.
	maxMsg := max(s.cfg.MaxEntryBytes, MaxAddBatchBytes) + 64<<10
	// No static InitialWindowSize: gRPC's BDP-based dynamic window
	// measured faster for the ledger benchmark than 8/16 MiB windows.
	opts := append(s.cfg.GRPCServerOptions(maxMsg, netguard.DefaultKeepalive()), grpc.MaxSendMsgSize(maxMsg+64<<10),
		experimental.BufferPool(BufferPool()), grpc.ForceServerCodecV2(Codec()))
	opts = append(opts, s.sec.ServerOptions(Authorizer(s.sec))...)
	s.grpc = grpc.NewServer(append(opts, identityServerOptions(s)...)...)
	bookiev1.RegisterBookieServer(s.grpc, &service{srv: s})
	go func() {
		if err := s.grpc.Serve(lis); err != nil {
			s.log.Error("bookie grpc serve", "err", err)
		}
	}()
	if s.cfg.InProcess {
		ip := bufconn.Listen(inProcessBuffer)
		s.inproc = ip
		role := s.cfg.InProcessRole
		if role == "" {
			role = security.ComponentRole(security.KindBroker, s.cfg.Region)
		}
		go func() {
			if err := s.grpc.Serve(security.InProcessListener(ip, role)); err != nil {
				s.log.Error("bookie grpc serve (in-process)", "err", err)
			}
		}()
	}
	if s.cfg.HTTPAddr != "" {
		hl, err := net.Listen("tcp", s.cfg.HTTPAddr)
		if err != nil {
			s.grpc.Stop()
			st.close(true)
			return fmt.Errorf("bookie: listen http %s: %w", s.cfg.HTTPAddr, err)
		}
		hl = netguard.LimitPerIP(hl, s.cfg.MaxConnectionsPerIP, s.guard.RefusedPerIP("http"))
		s.httpLis = hl
		mux := http.NewServeMux()
		if s.gather != nil {
			mux.Handle("/metrics", promhttp.HandlerFor(s.gather, promhttp.HandlerOpts{}))
		}
		mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
		mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
			if ro, why := s.st.readOnly(); ro {
				w.WriteHeader(http.StatusServiceUnavailable)
				fmt.Fprintln(w, "read-only:", why)
				return
			}
			fmt.Fprintln(w, "ready")
		})
		if ffs, ok := s.fs.(*faultfs.FaultFS); ok && s.cfg.Testing.FaultHTTP {
			mux.HandleFunc("POST /debug/faults", func(w http.ResponseWriter, r *http.Request) {
				body, err := netguard.ReadBody(w, r, 4096)
				if err != nil {
					http.Error(w, "faults: "+err.Error(), http.StatusBadRequest)
					return
				}
				s.log.Warn("fault injection command", "cmd", string(body))
				ans, err := ffs.Exec(string(body))
				if err != nil {
					code := http.StatusBadRequest
					if !errors.Is(err, faultfs.ErrBadCommand) {
						code = http.StatusConflict
					}
					http.Error(w, err.Error(), code)
					return
				}
				s.log.Warn("fault injection command applied", "cmd", string(body), "answer", ans)
				fmt.Fprintln(w, ans)
			})
		}
		// Health probes stay open: a kubelet cannot present a token.
		s.httpSrv = s.cfg.HTTPServer(s.sec.HTTPHandler(httpAuthorize(s.sec, mux), "/healthz", "/readyz"),
			slog.NewLogLogger(s.log.Handler(), slog.LevelDebug))
		tl := s.sec.HTTPListener(hl)
		go func() {
			if err := s.httpSrv.Serve(tl); err != nil && !errors.Is(err, http.ErrServerClosed) {
				s.log.Error("bookie http serve", "err", err)
			}
		}()
	}
	if s.cfg.Gossip != nil {
		gc := *s.cfg.Gossip
		gc.NodeName, gc.Region, gc.Rack, gc.Role = s.cfg.ID, s.cfg.Region, s.cfg.Rack, topology.RoleBookie
		gc.Meta = s.gossipMeta()
		gc.Logger = s.log
		gc.Registerer = s.reg
		m, err := topology.NewMembership(gc)
		if err != nil {
			s.grpc.Stop()
			if s.httpSrv != nil {
				s.httpSrv.Close()
			}
			st.close(true)
			return fmt.Errorf("bookie: join gossip: %w", err)
		}
		s.members = m
	}
	bgCtx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	s.bg.Add(1)
	go s.maintain(bgCtx)
	s.bg.Add(1)
	go s.scrubLoop(bgCtx)
	if s.cfg.Metadata != nil {
		s.regState = newRegistration(s)
		s.regState.start(ctx, bgCtx, &s.bg)
		if s.limboBelow.Load() > 0 {
			s.bg.Add(1)
			go s.watchLimbo(bgCtx)
		}
	}
	s.log.Info("bookie started", "addr", lis.Addr().String(), "http", s.HTTPAddr(), "journal", s.cfg.JournalDir, "instance", s.instanceID)
	return nil
}

// maintain runs periodic disk checks, checkpoints and GC.
func (s *Server) maintain(ctx context.Context) {
	defer s.bg.Done()
	disk := time.NewTicker(s.cfg.DiskCheckInterval)
	defer disk.Stop()
	ckpt := time.NewTicker(s.cfg.CheckpointInterval)
	defer ckpt.Stop()
	var gcC <-chan time.Time
	if s.cfg.GCInterval > 0 {
		t := time.NewTicker(s.cfg.GCInterval)
		defer t.Stop()
		gcC = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-disk.C:
			s.st.checkDisk()
		case <-s.st.roNotify:
			s.publishReadOnly(ctx)
		case <-ckpt.C:
			if err := s.Checkpoint(ctx); err != nil && ctx.Err() == nil {
				s.log.Warn("periodic checkpoint failed", "err", err)
			}
		case <-gcC:
			if _, err := s.GC(ctx); err != nil && ctx.Err() == nil {
				s.log.Warn("periodic gc failed", "err", err)
			}
		}
	}
}

// Stop shuts the bookie down gracefully: stops serving, writes queued
// records, takes a final checkpoint and leaves the registry. Idempotent.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopLocked(true)
}

// Kill stops the bookie abruptly, as close to a crash as an in-process
// server gets: connections are cut, queued adds fail unanswered-as-durable,
// no final checkpoint is written and the registry session is abandoned (it
// expires on its TTL). Restarting on the same dirs replays the journal.
func (s *Server) Kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopLocked(false)
}

func (s *Server) stopLocked(graceful bool) {
	if !s.started || s.stopped {
		return
	}
	s.stopped = true
	if s.cancel != nil {
		s.cancel()
	}
	if s.regState != nil && graceful {
		s.regState.leave()
	}
	if s.members != nil {
		if graceful {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			if err := s.members.Leave(ctx); err != nil {
				s.log.Warn("gossip leave failed", "err", err)
			}
			cancel()
		} else {
			s.members.Shutdown()
		}
	}
	if graceful {
		done := make(chan struct{})
		go func() { s.grpc.GracefulStop(); close(done) }()
		select {
		case <-done:
		case <-time.After(time.Second):
			// Long-lived AddEntries streams never end on their own.
			s.grpc.Stop()
		}
	} else {
		s.grpc.Stop()
	}
	if s.httpSrv != nil {
		s.httpSrv.Close()
	}
	s.bg.Wait()
	s.st.close(graceful)
	s.closeSec()
	s.log.Info("bookie stopped", "graceful", graceful)
}

// inProcessBuffer is the in-memory listener's buffer per direction of a
// connection: a few adds of 1 MiB batches in flight.
const inProcessBuffer = 4 << 20

// DialInProcess connects to the running server over its in-memory
// listener (Config.InProcess): the same gRPC service, no socket and no
// TLS handshake (the server authenticates it as Config.InProcessRole). It
// fails when the server is not running or InProcess is off.
func (s *Server) DialInProcess(ctx context.Context) (net.Conn, error) {
	s.mu.Lock()
	ip := s.inproc
	s.mu.Unlock()
	if ip == nil {
		return nil, fmt.Errorf("bookie: no in-process listener (InProcess off or not started)")
	}
	c, err := ip.DialContext(ctx)
	if err != nil {
		return nil, err
	}
	return security.InProcessConn(c), nil
}

// Addr returns the real gRPC listen address (valid after Start).
func (s *Server) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lis == nil {
		return ""
	}
	return s.lis.Addr().String()
}

// HTTPAddr returns the real HTTP listen address ("" when disabled or before Start).
func (s *Server) HTTPAddr() string {
	if s.httpLis == nil {
		return ""
	}
	return s.httpLis.Addr().String()
}

func (s *Server) advertised() string {
	if s.cfg.AdvertiseAddr != "" {
		return s.cfg.AdvertiseAddr
	}
	if s.lis == nil {
		return ""
	}
	return s.lis.Addr().String()
}

// gossipMeta is the metadata published with the bookie's gossip node.
func (s *Server) gossipMeta() map[string]string {
	ro, _ := s.st.readOnly()
	return map[string]string{"addr": s.advertised(), "read_only": strconv.FormatBool(ro)}
}

// publishReadOnly pushes a read-only change to the registry and gossip.
func (s *Server) publishReadOnly(ctx context.Context) {
	if s.regState != nil {
		s.regState.markDirty()
	}
	if s.members != nil {
		uctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		if err := s.members.UpdateMeta(uctx, s.gossipMeta()); err != nil && ctx.Err() == nil {
			s.log.Warn("gossip metadata update failed", "err", err)
		}
		cancel()
	}
}

// Registered reports whether the bookie's registry key is currently written
// (always false without Config.Metadata).
func (s *Server) Registered() bool { return s.regState != nil && s.regState.registered.Load() }

// Membership returns the bookie's gossip membership (nil without Config.Gossip).
func (s *Server) Membership() *topology.Membership { return s.members }

// Gatherer returns the gatherer serving the bookie's metrics (nil when the
// configured Registerer is not a Gatherer and Config.Gatherer is unset).
func (s *Server) Gatherer() prometheus.Gatherer { return s.gather }

// ID returns the bookie's ID.
func (s *Server) ID() string { return s.cfg.ID }

// InstanceID returns the instance UUID of the bookie's cookie (valid after
// Start; new after every Format).
func (s *Server) InstanceID() string { return s.instanceID }

// InLimbo reports whether the bookie is in limbo (re-formatted, answering
// "ledger unknown" for ledgers its previous instance may have held).
func (s *Server) InLimbo() bool { return s.limboBelow.Load() > 0 }

// Config returns the server's config.
func (s *Server) Config() Config { return s.cfg }

// FS returns the file system the bookie writes through.
func (s *Server) FS() faultfs.FS { return s.fs }

// ReadOnly reports whether the bookie refuses adds, and why.
func (s *Server) ReadOnly() (bool, string) { return s.st.readOnly() }

// CheckDisk measures disk usage now (normally done every
// DiskCheckInterval) and updates the read-only state; it returns the
// usage of the fullest data disk.
func (s *Server) CheckDisk() faultfs.Usage { return s.st.checkDisk() }

// Checkpoint persists the index now (normally every CheckpointInterval).
func (s *Server) Checkpoint(ctx context.Context) error {
	s.st.maintMu.Lock()
	defer s.st.maintMu.Unlock()
	_, err := s.st.checkpointLocked(ctx)
	return err
}

// GC runs garbage collection now (normally every GCInterval): journal
// files with nothing live are deleted, mostly-dead ones compacted.
func (s *Server) GC(ctx context.Context) (GCStats, error) { return s.st.gc(ctx) }

// JournalBytes returns the total size of the journal files.
func (s *Server) JournalBytes() int64 {
	s.st.mu.RLock()
	defer s.st.mu.RUnlock()
	var n int64
	for _, sz := range s.st.files {
		n += sz
	}
	return n
}

// fence durably fences the ledger and returns its last entry and LAC.
func (s *Server) fence(ctx context.Context, ledger int64) (last, lac int64, err error) {
	r := s.st.submitWait(ctx, &op{kind: recFence, ledger: ledger})
	if r.err != nil {
		return -1, -1, r.err
	}
	return r.last, r.lac, nil
}

// deleteLedger durably deletes the ledger from the index.
func (s *Server) deleteLedger(ctx context.Context, ledger int64) error {
	return s.st.submitWait(ctx, &op{kind: recDelete, ledger: ledger}).err
}
