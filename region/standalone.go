package region

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/meridianmq/meridian/bookie"
	"github.com/meridianmq/meridian/bookie/autorecovery"
	"github.com/meridianmq/meridian/bookie/ledger"
	"github.com/meridianmq/meridian/broker"
	"github.com/meridianmq/meridian/metadata"
	"github.com/meridianmq/meridian/security"
	"github.com/meridianmq/meridian/topology"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"google.golang.org/grpc"
)

// StandaloneConfig configures a whole region in one process.
type StandaloneConfig struct {
	// DataDir holds everything (metadata Raft log, bookie journal and
	// ledgers); default "./data".
	DataDir string
	// GRPCAddr is the broker's client/admin gRPC address (default
	// 127.0.0.1:6650; port 0 picks a free port).
	GRPCAddr string
	// HTTPAddr serves /metrics, /healthz, /readyz and the admin JSON API
	// (default 127.0.0.1:8080; port 0 picks a free port).
	HTTPAddr string
	// Region names the region (default "standalone").
	Region string
	// Logger receives every component's logs (default: discard).
	Logger *slog.Logger
	// Broker, if set, edits the broker config before it starts (tests use
	// it for short intervals).
	Broker func(*broker.Config)
	// Secure turns on TLS (mutual between the parts) and token
	// authentication with a CA, certificates, a token key and an admin
	// token generated once in DataDir/security (security.Provision) and
	// reused on every start; see SecurityFiles.
	Secure bool
}

// Standalone is metadata (one Dragonboat replica), one bookie (E=Qw=Qa=1),
// an autorecovery auditor and worker, and one broker running in this
// process. With one bookie autorecovery has nowhere to copy to, but the
// auditor still marks and reports (meridian admin bookies, /metrics).
type Standalone struct {
	meta    *metadata.Node
	bookie  *bookie.Server
	ledgers *ledger.Client
	auditor *autorecovery.Auditor
	worker  *autorecovery.Worker
	broker  *broker.Server
	log     *slog.Logger
	// sec is what Secure provisioned (zero when off); rts the security
	// runtimes of the parts, closed last.
	sec security.Provisioned
	rts []*security.Runtime
}

// SecurityFiles returns the files of a Secure standalone: the CA bundle
// clients trust and the admin token (zero when not secure).
func (s *Standalone) SecurityFiles() security.Provisioned { return s.sec }

// runtime returns the security runtime of a part with role (nil when
// the standalone is not secure).
func (s *Standalone) runtime(role string) (*security.Runtime, error) {
	if s.sec.Dir == "" {
		return nil, nil
	}
	rt, err := security.NewRuntime(s.sec.Component(role), s.log.With("component", "security", "role", role))
	if err != nil {
		return nil, err
	}
	s.rts = append(s.rts, rt)
	return rt, nil
}

// dialOptions are rt's dial options (none when rt is nil).
func dialOptions(rt *security.Runtime) []grpc.DialOption {
	if rt == nil {
		return nil
	}
	return rt.DialOptions("")
}

// StartStandalone starts the region and returns once it can take writes.
func StartStandalone(ctx context.Context, cfg StandaloneConfig) (*Standalone, error) {
	if cfg.DataDir == "" {
		cfg.DataDir = "./data"
	}
	if cfg.GRPCAddr == "" {
		cfg.GRPCAddr = "127.0.0.1:6650"
	}
	if cfg.HTTPAddr == "" {
		cfg.HTTPAddr = "127.0.0.1:8080"
	}
	if cfg.Region == "" {
		cfg.Region = "standalone"
	}
	if err := broker.ValidateName("region", cfg.Region); err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("region: data dir: %w", err)
	}
	sa := &Standalone{log: log}
	ok := false
	defer func() {
		if !ok {
			sa.Close()
		}
	}()
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if cfg.Secure {
		host, _, _ := net.SplitHostPort(cfg.GRPCAddr)
		roles := []string{}
		for _, k := range []string{"metadata", "bookie", "broker", "autorecovery"} {
			roles = append(roles, security.ComponentRole(k, cfg.Region))
		}
		p, err := security.Provision(filepath.Join(cfg.DataDir, "security"), roles, []string{host})
		if err != nil {
			return nil, err
		}
		sa.sec = p
	}
	metaRT, err := sa.runtime(security.ComponentRole("metadata", cfg.Region))
	if err != nil {
		return nil, err
	}

	// A fresh data dir's Raft port is picked free, then bound by the node:
	// another process can take it in between. Such a bind failure on a
	// port just picked (nothing recorded in it yet) picks another one; a
	// recorded port is the Raft log's and must not move.
	addrFile := filepath.Join(cfg.DataDir, "raft-address")
	for attempt := 1; ; attempt++ {
		raftAddr, fresh, err := stickyAddr(addrFile)
		if err != nil {
			return nil, err
		}
		mcfg := metadata.SingleNodeConfig(filepath.Join(cfg.DataDir, "metadata"), raftAddr, metadata.GlobalShard, cfg.Region)
		mcfg.Logger = log.With("component", "metadata")
		mreg := &undoRegisterer{Registerer: reg}
		mcfg.Registerer = mreg
		mcfg.SecurityRuntime = metaRT
		if sa.meta, err = metadata.NewNode(mcfg); err != nil {
			return nil, err
		}
		err = sa.meta.Start(ctx)
		if err == nil {
			break
		}
		sa.meta = nil
		mreg.undo() // the next attempt's node registers the same metrics
		if !fresh || attempt == 5 || !strings.Contains(err.Error(), "address already in use") {
			return nil, err
		}
		log.Warn("the Raft port picked was taken before the bind: picking another", "addr", raftAddr, "attempt", attempt)
		if err := errors.Join(os.Remove(addrFile), os.RemoveAll(filepath.Join(cfg.DataDir, "metadata"))); err != nil {
			return nil, err
		}
	}
	if err := sa.meta.WaitReady(ctx); err != nil {
		return nil, fmt.Errorf("region: metadata not ready: %w", err)
	}
	global, err := sa.meta.Store(metadata.GlobalShard)
	if err != nil {
		return nil, err
	}
	regional, err := sa.meta.Store(cfg.Region)
	if err != nil {
		return nil, err
	}

	bcfg := bookie.DefaultConfig()
	bcfg.ID = "bookie-0"
	bcfg.Region = cfg.Region
	bcfg.Rack = "rack-0"
	bcfg.ListenAddr = "127.0.0.1:0"
	bcfg.InProcess = true // the ledger client below dials it without a socket
	bcfg.HTTPAddr = ""
	bcfg.JournalDir = filepath.Join(cfg.DataDir, "bookie", "journal")
	bcfg.LedgerDir = filepath.Join(cfg.DataDir, "bookie", "ledgers")
	bcfg.MaxEntryBytes = 6 << 20 // a 5 MiB message plus its metadata
	bcfg.Metadata = regional
	bcfg.SessionTTL = 5 * time.Second
	bcfg.Logger = log.With("component", "bookie")
	bcfg.Registerer = reg
	if bcfg.SecurityRuntime, err = sa.runtime(security.ComponentRole("bookie", cfg.Region)); err != nil {
		return nil, err
	}
	brokerRT, err := sa.runtime(security.ComponentRole("broker", cfg.Region))
	if err != nil {
		return nil, err
	}
	arRT, err := sa.runtime(security.ComponentRole("autorecovery", cfg.Region))
	if err != nil {
		return nil, err
	}
	sa.bookie, err = bookie.NewServer(bcfg)
	if err != nil {
		return nil, err
	}
	if err := sa.bookie.Start(ctx); err != nil {
		sa.bookie = nil
		return nil, err
	}

	pcfg := topology.DefaultRackAwareConfig()
	pcfg.MinRacksPerWriteQuorum = 1
	placement, err := topology.NewRackAwarePlacement(pcfg)
	if err != nil {
		return nil, err
	}
	lcfg := ledger.DefaultConfig()
	lcfg.Store = regional
	lcfg.Placement = placement
	lcfg.Region = cfg.Region
	lcfg.Logger = log.With("component", "ledger")
	lcfg.Registerer = reg
	lcfg.MaxEntryBytes = 6 << 20
	// The broker's adds and reads reach the bookie of this process over its
	// in-memory listener: the same gRPC service without the loopback
	// socket's syscalls and copies (its TCP address stays registered for
	// every other client).
	bk := sa.bookie
	lcfg.DialOptions = []grpc.DialOption{grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
		if addr == bk.Addr() {
			return bk.DialInProcess(ctx)
		}
		var d net.Dialer
		return d.DialContext(ctx, "tcp", addr)
	})}
	lcfg.DialOptions = append(lcfg.DialOptions, dialOptions(brokerRT)...)
	sa.ledgers, err = ledger.NewClient(lcfg)
	if err != nil {
		return nil, err
	}
	// The bookie registers asynchronously; wait until placement can see it.
	for {
		bs, err := sa.ledgers.Bookies(ctx)
		if err == nil && len(bs) > 0 {
			break
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("region: bookie did not register: %w", ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}

	acfg := autorecovery.DefaultAuditorConfig()
	acfg.Store = regional
	acfg.ID = "standalone-0"
	acfg.Logger = log
	acfg.Registerer = reg
	acfg.DialOptions = dialOptions(arRT)
	if sa.auditor, err = autorecovery.NewAuditor(acfg); err != nil {
		return nil, err
	}
	sa.auditor.Start()
	wcfg := autorecovery.DefaultWorkerConfig()
	wcfg.Store = regional
	wcfg.Placement = placement
	wcfg.ID = "standalone-0"
	wcfg.Logger = log
	wcfg.Registerer = reg
	wcfg.MaxEntryBytes = 6 << 20
	wcfg.DialOptions = dialOptions(arRT)
	if sa.worker, err = autorecovery.NewWorker(wcfg); err != nil {
		return nil, err
	}
	sa.worker.Start()

	brcfg := broker.DefaultConfig()
	brcfg.BrokerID = "broker-0"
	brcfg.Region = cfg.Region
	brcfg.GRPCAddress = cfg.GRPCAddr
	brcfg.HTTPAddress = cfg.HTTPAddr
	brcfg.Global = global
	brcfg.Regional = regional
	brcfg.Ledgers = broker.NewLedgerStore(sa.ledgers)
	brcfg.Logger = log.With("component", "broker")
	brcfg.Registerer = reg
	brcfg.Gatherer = reg
	brcfg.DefaultEnsembleSize, brcfg.DefaultWriteQuorum, brcfg.DefaultAckQuorum = 1, 1, 1
	// One broker: a restart should not wait long for its old claims.
	brcfg.SessionTTL = 3 * time.Second
	// A new user's data waits for a later `consume --from earliest`.
	brcfg.DefaultRetentionTime = broker.StandaloneRetentionTime
	brcfg.DefaultRetentionSizeBytes = broker.StandaloneRetentionSizeBytes
	brcfg.SecurityRuntime = brokerRT
	if cfg.Broker != nil {
		cfg.Broker(&brcfg)
	}
	sa.broker, err = broker.NewServer(brcfg)
	if err != nil {
		return nil, err
	}
	// The default namespace exists before /readyz can answer 200.
	if err := sa.broker.EnsureDefaultNamespace(ctx); err != nil {
		return nil, err
	}
	if err := sa.broker.Start(ctx); err != nil {
		sa.broker = nil
		return nil, err
	}
	ok = true
	return sa, nil
}

// undoRegisterer remembers what it registered so that a failed start can
// take it back.
type undoRegisterer struct {
	prometheus.Registerer
	done []prometheus.Collector
}

// Register implements prometheus.Registerer.
func (r *undoRegisterer) Register(c prometheus.Collector) error {
	if err := r.Registerer.Register(c); err != nil {
		return err
	}
	r.done = append(r.done, c)
	return nil
}

// MustRegister implements prometheus.Registerer.
func (r *undoRegisterer) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

// undo unregisters everything registered through r.
func (r *undoRegisterer) undo() {
	for _, c := range r.done {
		r.Registerer.Unregister(c)
	}
	r.done = nil
}

// pickRaftAddr picks a free loopback port for a fresh standalone's Raft
// address (a variable: tests make the first pick collide).
var pickRaftAddr = func() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// stickyAddr returns the loopback Raft address recorded in path, or picks a
// free one and records it (fresh): the Raft log remembers its address, so a
// restarted standalone must use the same one.
func stickyAddr(path string) (addr string, fresh bool, err error) {
	if b, err := os.ReadFile(path); err == nil {
		return strings.TrimSpace(string(b)), false, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", false, err
	}
	if addr, err = pickRaftAddr(); err != nil {
		return "", false, err
	}
	if err := os.WriteFile(path, []byte(addr+"\n"), 0o600); err != nil {
		return "", false, err
	}
	return addr, true, nil
}

// GRPCAddr is the broker's gRPC address.
func (s *Standalone) GRPCAddr() string { return s.broker.Addr() }

// HTTPAddr is the broker's HTTP address.
func (s *Standalone) HTTPAddr() string { return s.broker.HTTPAddr() }

// Broker returns the broker.
func (s *Standalone) Broker() *broker.Server { return s.broker }

// Kill stops the region as a crash would: the broker writes nothing more
// (no ledger close, no cursor persist, no ownership release) and the bookie
// skips its final checkpoint. A later StartStandalone on the same data dir
// must still have every acknowledged message. For tests.
func (s *Standalone) Kill() { s.shutdown(false) }

// Close stops the broker (flushing and closing ledgers, persisting cursors),
// then the bookie and metadata.
func (s *Standalone) Close() error {
	s.shutdown(true)
	return nil
}

// shutdown stops every part, broker first and metadata last; graceful
// chooses the broker's and bookie's clean stop over their crash-like kill.
func (s *Standalone) shutdown(graceful bool) {
	if s.broker != nil {
		if graceful {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			_ = s.broker.Stop(ctx)
			cancel()
		} else {
			s.broker.Kill()
		}
		s.broker = nil
	}
	s.closeAutorecovery()
	if s.ledgers != nil {
		_ = s.ledgers.Close()
		s.ledgers = nil
	}
	if s.bookie != nil {
		if graceful {
			s.bookie.Stop()
		} else {
			s.bookie.Kill()
		}
		s.bookie = nil
	}
	if s.meta != nil {
		s.meta.Stop()
		s.meta = nil
	}
	for _, rt := range s.rts {
		_ = rt.Close()
	}
	s.rts = nil
}

// Auditor returns the autorecovery auditor candidate.
func (s *Standalone) Auditor() *autorecovery.Auditor { return s.auditor }

func (s *Standalone) closeAutorecovery() {
	if s.worker != nil {
		_ = s.worker.Close()
		s.worker = nil
	}
	if s.auditor != nil {
		_ = s.auditor.Close()
		s.auditor = nil
	}
}
