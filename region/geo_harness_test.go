package region_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
	"github.com/meridianmq/meridian/bookie"
	"github.com/meridianmq/meridian/bookie/bookietest"
	"github.com/meridianmq/meridian/bookie/ledger"
	"github.com/meridianmq/meridian/broker"
	"github.com/meridianmq/meridian/chaos"
	"github.com/meridianmq/meridian/client"
	"github.com/meridianmq/meridian/metadata"
	"github.com/meridianmq/meridian/metadata/metadatatest"
	"github.com/meridianmq/meridian/topology"
	"github.com/prometheus/client_golang/prometheus"
)

// geoCluster is several regions in the test process sharing one global
// metadata shard, each with its own regional shard, bookies and brokers.
// Traffic between regions goes through a chaos.Network (one proxy per
// source region and remote broker address; brokers dial through their
// DialRewrite).
type geoCluster struct {
	t       *testing.T
	net     *chaos.Network
	global  metadata.Store
	names   []string
	regions map[string]*geoRegion
	opts    geoOptions
}

type geoOptions struct {
	brokers int
	broker  func(region string, i int, cfg *broker.Config)
}

type geoRegion struct {
	name     string
	regional metadata.Store
	bookies  *bookietest.Cluster
	addrs    []string
	rewrite  map[string]string

	mu      sync.Mutex
	brokers []*geoBroker
}

type geoBroker struct {
	srv *broker.Server
	lc  *ledger.Client
}

func geoLogger(t *testing.T) *slog.Logger {
	if os.Getenv("GEO_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

func startGeo(t *testing.T, names []string, opts geoOptions) *geoCluster {
	t.Helper()
	if opts.brokers == 0 {
		opts.brokers = 1
	}
	shards := append([]string{metadata.GlobalShard}, names...)
	mc := metadatatest.StartClusterWith(t, 1, metadatatest.Options{Shards: shards})
	g := &geoCluster{t: t, net: chaos.NewNetwork(nil), global: mc.Store(0, metadata.GlobalShard), names: names,
		regions: map[string]*geoRegion{}, opts: opts}
	t.Cleanup(g.net.Close)
	for _, n := range names {
		r := &geoRegion{name: n, regional: mc.Store(0, n), rewrite: map[string]string{}}
		r.bookies = bookietest.StartCluster(t, 3, bookietest.WithRegion(n), bookietest.WithMetadata(r.regional),
			bookietest.WithConfig(func(_ int, cfg *bookie.Config) { cfg.MaxEntryBytes = 6 << 20 }))
		for range opts.brokers {
			r.addrs = append(r.addrs, metadatatest.FreeAddr(t))
		}
		g.regions[n] = r
	}
	// One proxy per (source region, remote broker).
	for _, from := range names {
		for _, to := range names {
			if from == to {
				continue
			}
			for _, addr := range g.regions[to].addrs {
				p, err := g.net.Proxy(from, to, "127.0.0.1:0", addr)
				if err != nil {
					t.Fatal(err)
				}
				g.regions[from].rewrite[addr] = p.Addr()
			}
		}
	}
	t.Cleanup(g.close)
	for _, n := range names {
		for i := range opts.brokers {
			g.startBroker(n, i)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := g.broker(names[0], 0).EnsureDefaultNamespace(ctx); err != nil {
		t.Fatal(err)
	}
	return g
}

func (g *geoCluster) broker(region string, i int) *broker.Server {
	r := g.regions[region]
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.brokers[i].srv
}

// startBroker starts (or restarts, on the same address) broker i of region.
func (g *geoCluster) startBroker(region string, i int) {
	t := g.t
	r := g.regions[region]
	pcfg := topology.DefaultRackAwareConfig()
	pcfg.MinRacksPerWriteQuorum = 1
	placement, err := topology.NewRackAwarePlacement(pcfg)
	if err != nil {
		t.Fatal(err)
	}
	lcfg := ledger.DefaultConfig()
	lcfg.Store = r.regional
	lcfg.Placement = placement
	lcfg.Region = region
	lcfg.MaxEntryBytes = 6 << 20
	lcfg.AddTimeout = 3 * time.Second
	lc, err := ledger.NewClient(lcfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		bs, err := lc.Bookies(ctx)
		if err == nil && len(bs) >= 3 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("bookies of %s not registered: %v", region, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	cfg := broker.DefaultConfig()
	cfg.BrokerID = fmt.Sprintf("%s-broker-%d", region, i)
	cfg.Region = region
	cfg.GRPCAddress = r.addrs[i]
	cfg.Global, cfg.Regional = g.global, r.regional
	cfg.Ledgers = broker.NewLedgerStore(lc)
	cfg.Logger = geoLogger(t).With("region", region)
	reg := prometheus.NewRegistry()
	cfg.Registerer, cfg.Gatherer = reg, reg
	cfg.SessionTTL = 2 * time.Second
	cfg.CursorPersistInterval = 100 * time.Millisecond
	cfg.DefaultEnsembleSize, cfg.DefaultWriteQuorum, cfg.DefaultAckQuorum = 3, 2, 2
	cfg.DialRewrite = r.rewrite
	cfg.Replication.CheckInterval = 300 * time.Millisecond
	cfg.Replication.KeeperInterval = time.Second
	if g.opts.broker != nil {
		g.opts.broker(region, i, &cfg)
	}
	srv, err := broker.NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// The address was free a moment ago; a restart may find it in
	// TIME_WAIT-free reuse only after the old listener closed.
	for {
		err = srv.Start(ctx)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("start broker %s/%d: %v", region, i, err)
		}
		time.Sleep(100 * time.Millisecond)
		if srv, err = broker.NewServer(cfg); err != nil {
			t.Fatal(err)
		}
	}
	r.mu.Lock()
	for len(r.brokers) <= i {
		r.brokers = append(r.brokers, nil)
	}
	r.brokers[i] = &geoBroker{srv: srv, lc: lc}
	r.mu.Unlock()
}

// kill crashes broker i of region (nothing flushed or released).
func (g *geoCluster) kill(region string, i int) {
	r := g.regions[region]
	r.mu.Lock()
	b := r.brokers[i]
	r.brokers[i] = nil
	r.mu.Unlock()
	b.srv.Kill()
	_ = b.lc.Close()
}

func (g *geoCluster) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for _, r := range g.regions {
		r.mu.Lock()
		bs := r.brokers
		r.brokers = nil
		r.mu.Unlock()
		for _, b := range bs {
			if b == nil {
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				_ = b.srv.Stop(ctx)
				_ = b.lc.Close()
			}()
		}
	}
	wg.Wait()
}

// url returns the live brokers of region for a client.
func (g *geoCluster) url(region string) string {
	r := g.regions[region]
	r.mu.Lock()
	defer r.mu.Unlock()
	s := ""
	for i, b := range r.brokers {
		if b == nil {
			continue
		}
		if s != "" {
			s += ","
		}
		s += r.addrs[i]
	}
	return s
}

// ownerIndex returns the index of the broker of region that owns topic
// (-1 if none is loaded).
func (g *geoCluster) ownerIndex(region, topic string) int {
	r := g.regions[region]
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, b := range r.brokers {
		if b == nil {
			continue
		}
		for _, tp := range b.srv.OwnedTopics() {
			if tp == topic {
				return i
			}
		}
	}
	return -1
}

// createNamespace creates ns replicated to regions, keeping everything.
func (g *geoCluster) createNamespace(ns string, regions ...string) {
	g.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	adm, err := client.NewAdmin(ctx, g.url(g.names[0]))
	if err != nil {
		g.t.Fatal(err)
	}
	defer adm.Close(ctx)
	if err := adm.CreateNamespace(ctx, ns, &clientv1.NamespacePolicies{RetentionTimeSeconds: -1, RetentionSizeBytes: -1,
		ReplicationRegions: regions}); err != nil {
		g.t.Fatal(err)
	}
}

func (g *geoCluster) setPolicies(region, ns string, edit func(p *clientv1.NamespacePolicies)) {
	g.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	adm, err := client.NewAdmin(ctx, g.url(region))
	if err != nil {
		g.t.Fatal(err)
	}
	defer adm.Close(ctx)
	p, err := adm.GetNamespacePolicies(ctx, ns)
	if err != nil {
		g.t.Fatal(err)
	}
	edit(p)
	if err := adm.SetNamespacePolicies(ctx, ns, p); err != nil {
		g.t.Fatal(err)
	}
}

func (g *geoCluster) stats(region, topic string) (*clientv1.TopicStats, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	adm, err := client.NewAdmin(ctx, g.url(region))
	if err != nil {
		return nil, err
	}
	defer adm.Close(ctx)
	return adm.TopicStats(ctx, topic)
}

// msgKey identifies a test message: its origin region and its number
// there (properties "o" and "n").
type msgKey struct {
	origin string
	n      int
}

// geoProducer produces numbered messages into one region and records
// which were acknowledged.
type geoProducer struct {
	region string
	cl     *client.Client
	p      *client.Producer

	mu    sync.Mutex
	next  int
	acked map[int]bool
	fails int
}

func (g *geoCluster) producer(region, topic string) *geoProducer {
	g.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := client.New(ctx, client.Options{URL: g.url(region), MaxBackoff: 500 * time.Millisecond})
	if err != nil {
		g.t.Fatal(err)
	}
	p, err := cl.NewProducer(ctx, client.ProducerOptions{Topic: topic, Name: "geo-" + region, BatchingMaxMessages: 20,
		BatchingMaxDelay: 2 * time.Millisecond})
	if err != nil {
		g.t.Fatal(err)
	}
	gp := &geoProducer{region: region, cl: cl, p: p, acked: map[int]bool{}}
	g.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = cl.Close(ctx)
	})
	return gp
}

// send produces n messages asynchronously and waits for their outcomes.
func (gp *geoProducer) send(n int) {
	var wg sync.WaitGroup
	for range n {
		gp.mu.Lock()
		k := gp.next
		gp.next++
		gp.mu.Unlock()
		wg.Add(1)
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		gp.p.SendAsync(ctx, &client.Message{Payload: []byte(fmt.Sprintf("%s-%d", gp.region, k)),
			Properties: map[string]string{"o": gp.region, "n": strconv.Itoa(k)}}, func(_ client.MessageID, _ *client.Message, err error) {
			defer wg.Done()
			defer cancel()
			gp.mu.Lock()
			defer gp.mu.Unlock()
			if err == nil {
				gp.acked[k] = true
			} else {
				gp.fails++
			}
		})
	}
	wg.Wait()
}

// produceFor sends batches of n until stop is closed.
func (gp *geoProducer) produceFor(stop <-chan struct{}, n int) {
	for {
		select {
		case <-stop:
			return
		default:
		}
		gp.send(n)
		time.Sleep(20 * time.Millisecond)
	}
}

func (gp *geoProducer) ackedKeys() []msgKey {
	gp.mu.Lock()
	defer gp.mu.Unlock()
	out := make([]msgKey, 0, len(gp.acked))
	for k := range gp.acked {
		out = append(out, msgKey{gp.region, k})
	}
	return out
}

// geoReader consumes a region's copy of a topic from the earliest entry
// and checks it: duplicates (the same message stored twice, at two
// different IDs; redeliveries of one ID are not duplicates) and per-origin
// order (first deliveries of each origin in increasing n).
type geoReader struct {
	region string
	co     *client.Consumer
	cl     *client.Client

	mu         sync.Mutex
	seen       map[msgKey]client.MessageID
	ids        map[client.MessageID]bool
	lastN      map[string]int
	dups       int
	orderFails int
	firstOrder string
}

func (g *geoCluster) reader(region, topic string) *geoReader {
	g.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := client.New(ctx, client.Options{URL: g.url(region), MaxBackoff: 500 * time.Millisecond})
	if err != nil {
		g.t.Fatal(err)
	}
	co, err := cl.Subscribe(ctx, client.ConsumerOptions{Topic: topic, Subscription: "geo-check", InitialPosition: client.Earliest})
	if err != nil {
		g.t.Fatal(err)
	}
	r := &geoReader{region: region, co: co, cl: cl, seen: map[msgKey]client.MessageID{}, ids: map[client.MessageID]bool{}, lastN: map[string]int{}}
	rctx, rcancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			m, err := co.Receive(rctx)
			if err != nil {
				if rctx.Err() != nil {
					return
				}
				time.Sleep(50 * time.Millisecond)
				continue
			}
			r.observe(m)
			_ = co.Ack(rctx, m.ID)
		}
	}()
	g.t.Cleanup(func() {
		rcancel()
		<-done
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = cl.Close(ctx)
	})
	return r
}

func (r *geoReader) observe(m *client.ReceivedMessage) {
	n, err := strconv.Atoi(m.Properties["n"])
	if err != nil {
		return
	}
	k := msgKey{m.Properties["o"], n}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ids[m.ID] {
		return // a redelivery of the same stored message
	}
	r.ids[m.ID] = true
	if _, ok := r.seen[k]; ok {
		r.dups++
		return
	}
	r.seen[k] = m.ID
	if last, ok := r.lastN[k.origin]; ok && n < last {
		r.orderFails++
		if r.firstOrder == "" {
			r.firstOrder = fmt.Sprintf("origin %s: %d after %d", k.origin, n, last)
		}
	}
	r.lastN[k.origin] = max(r.lastN[k.origin], n)
}

// missing returns the keys of want not yet seen.
func (r *geoReader) missing(want []msgKey) []msgKey {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []msgKey
	for _, k := range want {
		if _, ok := r.seen[k]; !ok {
			out = append(out, k)
		}
	}
	return out
}

func (r *geoReader) counts() (seen, dups, orderFails int, firstOrder string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.seen), r.dups, r.orderFails, r.firstOrder
}

// converge waits until every reader has every acknowledged message of
// every producer, then checks no duplicates and per-origin order, and
// logs the counts.
func (g *geoCluster) converge(timeout time.Duration, readers []*geoReader, producers []*geoProducer) {
	g.t.Helper()
	var want []msgKey
	fails := 0
	for _, p := range producers {
		want = append(want, p.ackedKeys()...)
		p.mu.Lock()
		fails += p.fails
		p.mu.Unlock()
	}
	deadline := time.Now().Add(timeout)
	for _, r := range readers {
		for {
			miss := r.missing(want)
			if len(miss) == 0 {
				break
			}
			if time.Now().After(deadline) {
				sort.Slice(miss, func(i, j int) bool {
					return miss[i].origin < miss[j].origin || miss[i].origin == miss[j].origin && miss[i].n < miss[j].n
				})
				g.t.Fatalf("region %s misses %d of %d acknowledged messages after %v (first: %v)", r.region, len(miss), len(want), timeout, miss[0])
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	for _, r := range readers {
		seen, dups, orderFails, first := r.counts()
		g.t.Logf("region %s: %d acknowledged (%d sends failed, may or may not be stored), %d distinct delivered, %d duplicates, %d order violations",
			r.region, len(want), fails, seen, dups, orderFails)
		if dups != 0 {
			g.t.Errorf("region %s: %d duplicates", r.region, dups)
		}
		if orderFails != 0 {
			g.t.Errorf("region %s: %d per-origin order violations (first: %s)", r.region, orderFails, first)
		}
	}
}
