// Package regiontest starts a region on loopback for tests: one metadata
// node (global and regional shards), M bookies on distinct racks and N
// brokers, each broker with its own ledger client, and lets tests kill or
// pause (zombify) brokers. StartRegions (multi.go) starts several regions
// sharing the global shard, with link proxies between them.
package regiontest

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
	"github.com/meridianmq/meridian/bookie"
	"github.com/meridianmq/meridian/bookie/bookietest"
	"github.com/meridianmq/meridian/bookie/ledger"
	"github.com/meridianmq/meridian/broker"
	"github.com/meridianmq/meridian/metadata"
	"github.com/meridianmq/meridian/metadata/metadatatest"
	"github.com/meridianmq/meridian/security"
	"github.com/meridianmq/meridian/topology"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// Region is the name of the test region.
const Region = "test"

// Options tune a test region.
type Options struct {
	// Brokers and Bookies count the servers (defaults 2 and 3).
	Brokers, Bookies int
	// Broker edits each broker's config before it starts.
	Broker func(i int, cfg *broker.Config)
	// Ledger edits each broker's ledger client config (AddTimeout 3s by
	// default here) before it starts.
	Ledger func(i int, cfg *ledger.Config)
	// Security, when set, gives each component its security block: kind
	// is security.KindMetadata, KindBookie or KindBroker, i its index. The
	// metadata node then also serves gRPC and HTTP (to be reached over
	// TLS), and each broker's ledger client dials bookies with the
	// broker's runtime.
	Security func(kind string, i int) security.Config
	// KeepAddrs restarts a broker on its previous gRPC address (clients
	// that know only the first addresses keep finding it).
	KeepAddrs bool
}

// Cluster is a running test region.
type Cluster struct {
	t        testing.TB
	opts     Options
	Global   metadata.Store
	Regional metadata.Store
	Bookies  *bookietest.Cluster
	// Meta is the metadata cluster (Start only; nil in a Multi region,
	// see Multi.Meta).
	Meta *metadatatest.Cluster

	// region is the region's name (Region for Start); idPrefix starts its
	// broker IDs.
	region, idPrefix string
	// grpcAddrs, when set, are the brokers' reserved gRPC addresses (a
	// restarted broker gets its address back); rewrite is every broker's
	// DialRewrite (multi-region: remote brokers through link proxies).
	grpcAddrs []string
	// grpcLis are the reserved addresses' open listeners, each handed to
	// its broker's first start (then nil).
	grpcLis []net.Listener
	rewrite map[string]string

	mu      sync.Mutex
	brokers []*brokerNode
}

type brokerNode struct {
	srv     *broker.Server
	ledgers *ledger.Client
	// sec is the broker's and its ledger client's runtime (nil: security
	// off), closed with them.
	sec *security.Runtime
}

// close stops the node's ledger client and security runtime.
func (b *brokerNode) close() {
	_ = b.ledgers.Close()
	_ = b.sec.Close()
}

// Start starts a region and stops it in t.Cleanup.
func Start(t testing.TB, opts Options) *Cluster {
	t.Helper()
	if opts.Brokers == 0 {
		opts.Brokers = 2
	}
	if opts.Bookies == 0 {
		opts.Bookies = 3
	}
	mopts := metadatatest.Options{Shards: []string{metadata.GlobalShard, Region}}
	if opts.Security != nil {
		mopts.GRPC, mopts.HTTP = true, true
		mopts.Configure = func(i int, cfg *metadata.NodeConfig) { cfg.Security = opts.Security(security.KindMetadata, i) }
	}
	mc := metadatatest.StartClusterWith(t, 1, mopts)
	c := &Cluster{t: t, opts: opts, Meta: mc, Global: mc.Store(0, metadata.GlobalShard), Regional: mc.Store(0, Region), region: Region, idPrefix: "broker-"}
	c.start()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.Broker(0).EnsureDefaultNamespace(ctx); err != nil {
		t.Fatalf("regiontest: default namespace: %v", err)
	}
	return c
}

// start starts the region's bookies and brokers (metadata stores set).
func (c *Cluster) start() {
	c.Bookies = bookietest.StartCluster(c.t, c.opts.Bookies, bookietest.WithRegion(c.region), bookietest.WithMetadata(c.Regional),
		bookietest.WithConfig(func(i int, cfg *bookie.Config) {
			cfg.MaxEntryBytes = 6 << 20
			if c.opts.Security != nil {
				cfg.Security = c.opts.Security(security.KindBookie, i)
			}
		}))
	c.t.Cleanup(c.Close)
	for i := range c.opts.Brokers {
		c.startBroker(i)
	}
}

// Name returns the region's name.
func (c *Cluster) Name() string { return c.region }

func (c *Cluster) startBroker(i int) {
	t := c.t
	pcfg := topology.DefaultRackAwareConfig()
	pcfg.MinRacksPerWriteQuorum = 1
	placement, err := topology.NewRackAwarePlacement(pcfg)
	if err != nil {
		t.Fatal(err)
	}
	lcfg := ledger.DefaultConfig()
	lcfg.Store = c.Regional
	lcfg.Placement = placement
	lcfg.Region = c.region
	lcfg.MaxEntryBytes = 6 << 20
	lcfg.AddTimeout = 3 * time.Second
	if c.opts.Ledger != nil {
		c.opts.Ledger(i, &lcfg)
	}
	var sec *security.Runtime
	if c.opts.Security != nil {
		if sec, err = security.NewRuntime(c.opts.Security(security.KindBroker, i), nil); err != nil {
			t.Fatal(err)
		}
		lcfg.DialOptions = append(lcfg.DialOptions, sec.DialOptions("")...)
	}
	lc, err := ledger.NewClient(lcfg)
	if err != nil {
		_ = sec.Close()
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		bs, err := lc.Bookies(ctx)
		if err == nil && len(bs) >= c.opts.Bookies {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("regiontest: bookies not registered: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	cfg := broker.DefaultConfig()
	cfg.BrokerID = fmt.Sprintf("%s%d", c.idPrefix, i)
	cfg.Region = c.region
	cfg.GRPCAddress = "127.0.0.1:0"
	if i < len(c.grpcAddrs) {
		cfg.GRPCAddress = c.grpcAddrs[i]
	}
	c.mu.Lock()
	if i < len(c.grpcLis) && c.grpcLis[i] != nil {
		cfg.GRPCListener, c.grpcLis[i] = c.grpcLis[i], nil
	}
	c.mu.Unlock()
	if c.rewrite != nil {
		cfg.DialRewrite = maps.Clone(c.rewrite)
	}
	cfg.HTTPAddress = "127.0.0.1:0"
	cfg.Global, cfg.Regional = c.Global, c.Regional
	cfg.Ledgers = broker.NewLedgerStore(lc)
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	reg := prometheus.NewRegistry()
	cfg.Registerer, cfg.Gatherer = reg, reg
	cfg.SessionTTL = 2 * time.Second
	cfg.CursorPersistInterval = 100 * time.Millisecond
	e := min(3, c.opts.Bookies)
	cfg.DefaultEnsembleSize, cfg.DefaultWriteQuorum, cfg.DefaultAckQuorum = e, min(2, e), min(2, e)
	cfg.SecurityRuntime = sec
	if c.opts.Broker != nil {
		c.opts.Broker(i, &cfg)
	}
	srv, err := broker.NewServer(cfg)
	if err != nil {
		_ = lc.Close()
		_ = sec.Close()
		t.Fatal(err)
	}
	// A restart listens on its old address again; another test process
	// may hold the port for a moment (then it is retried).
	for {
		err := srv.Start(ctx)
		if err == nil {
			break
		}
		if !strings.Contains(err.Error(), "address already in use") || ctx.Err() != nil {
			_ = lc.Close()
			_ = sec.Close()
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
		if srv, err = broker.NewServer(cfg); err != nil {
			t.Fatal(err)
		}
	}
	c.mu.Lock()
	for len(c.brokers) <= i {
		c.brokers = append(c.brokers, nil)
	}
	c.brokers[i] = &brokerNode{srv: srv, ledgers: lc, sec: sec}
	if c.opts.KeepAddrs {
		for len(c.grpcAddrs) <= i {
			c.grpcAddrs = append(c.grpcAddrs, "127.0.0.1:0")
		}
		c.grpcAddrs[i] = srv.Addr()
	}
	c.mu.Unlock()
}

// Broker returns broker i.
func (c *Cluster) Broker(i int) *broker.Server {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.brokers[i].srv
}

// Addrs returns the brokers' gRPC addresses.
func (c *Cluster) Addrs() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]string, len(c.brokers))
	for i, b := range c.brokers {
		out[i] = b.srv.Addr()
	}
	return out
}

// Kill crashes broker i: its gRPC server stops at once, nothing is flushed
// or released, its ledger client is closed; its session expires later.
func (c *Cluster) Kill(i int) {
	c.mu.Lock()
	b := c.brokers[i]
	c.mu.Unlock()
	b.srv.Kill()
	b.close()
}

// Restart starts broker i again after Kill (or a stop), with the same ID,
// config and, in a multi-region harness, the same gRPC address (the link
// proxies of the other regions keep reaching it).
func (c *Cluster) Restart(i int) {
	c.t.Helper()
	c.startBroker(i)
}

// Unload unloads topic through broker i (forwarded to the owner): the
// topic is closed gracefully and taken again by the next lookup.
func (c *Cluster) Unload(i int, topic string) error {
	cc, err := grpc.NewClient(c.Broker(i).Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err = clientv1.NewAdminClient(cc).UnloadTopic(ctx, &clientv1.UnloadTopicRequest{Topic: topic})
	return err
}

// Pause turns broker i into a zombie: it stops renewing its metadata
// session but keeps serving the topics it believes it owns.
func (c *Cluster) Pause(i int) { c.Broker(i).SuspendSessionForTesting() }

// Close stops every broker.
func (c *Cluster) Close() {
	c.mu.Lock()
	bs := c.brokers
	c.brokers = nil
	c.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, b := range bs {
		if b == nil {
			continue
		}
		_ = b.srv.Stop(ctx)
		b.close()
	}
}

// LookupOwner polls Lookup through the broker at addr until pred accepts
// the owner it names, and returns that owner; it fails t after 60 s (topic
// moves wait for a session to expire, which a loaded machine stretches).
func LookupOwner(t testing.TB, addr, topic string, pred func(owner string) bool) string {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	defer cc.Close()
	cli := clientv1.NewMeridianClient(cc)
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		r, err := cli.Lookup(ctx, &clientv1.LookupRequest{Topic: topic})
		cancel()
		if err == nil && pred(r.BrokerUrl) {
			return r.BrokerUrl
		}
		if time.Now().After(deadline) {
			t.Fatalf("lookup of %s via %s: last %v %v", topic, addr, r, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
