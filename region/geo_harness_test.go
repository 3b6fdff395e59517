package region_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
	"github.com/meridianmq/meridian/broker"
	"github.com/meridianmq/meridian/chaos"
	"github.com/meridianmq/meridian/client"
	"github.com/meridianmq/meridian/region/regiontest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// geoCluster wraps a regiontest.Multi (regions in the test process sharing
// one global metadata shard, region-to-region traffic through a
// chaos.Network) with the helpers of the geo tests.
type geoCluster struct {
	t     *testing.T
	m     *regiontest.Multi
	net   *chaos.Network
	names []string

	// secure, when set, is the test's security setup: every broker has
	// TLS (certificate broker.<region>) and token auth, and the helpers'
	// clients present secure.clientRole's token (geo_secure_test.go).
	secure *geoSecurity

	mu     sync.Mutex
	killed map[string]map[int]bool
}

type geoOptions struct {
	brokers int
	broker  func(region string, i int, cfg *broker.Config)
	// secure turns security on (geo_secure_test.go).
	secure *geoSecurity
}

func startGeo(t *testing.T, names []string, opts geoOptions) *geoCluster {
	t.Helper()
	if opts.brokers == 0 {
		opts.brokers = 1
	}
	m := regiontest.StartRegions(t, regiontest.MultiOptions{Regions: names, Brokers: opts.brokers,
		Broker: func(region string, i int, cfg *broker.Config) {
			if os.Getenv("GEO_LOG") != "" {
				cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})).With("region", region)
			}
			if opts.secure != nil {
				opts.secure.apply(region, cfg)
			}
			cfg.Replication.CheckInterval = 300 * time.Millisecond
			cfg.Replication.KeeperInterval = time.Second
			if opts.broker != nil {
				opts.broker(region, i, cfg)
			}
		}})
	return &geoCluster{t: t, m: m, net: m.Network, names: names, killed: map[string]map[int]bool{}, secure: opts.secure}
}

// clientOptions are the options of the helpers' clients of region (with
// the test's credentials when secure).
func (g *geoCluster) clientOptions(region string) client.Options {
	o := client.Options{URL: g.url(region), MaxBackoff: 500 * time.Millisecond}
	if g.secure != nil {
		g.secure.client(&o)
	}
	return o
}

// admin connects an admin client to region.
func (g *geoCluster) admin(ctx context.Context, region string) (*client.Admin, error) {
	return client.NewAdminWithOptions(ctx, g.clientOptions(region))
}

func (g *geoCluster) broker(region string, i int) *broker.Server { return g.m.Region(region).Broker(i) }

// kill crashes broker i of region (nothing flushed or released).
func (g *geoCluster) kill(region string, i int) {
	g.m.Region(region).Kill(i)
	g.mu.Lock()
	if g.killed[region] == nil {
		g.killed[region] = map[int]bool{}
	}
	g.killed[region][i] = true
	g.mu.Unlock()
}

// restart starts a killed broker again on its address.
func (g *geoCluster) restart(region string, i int) {
	g.m.Region(region).Restart(i)
	g.mu.Lock()
	delete(g.killed[region], i)
	g.mu.Unlock()
}

func (g *geoCluster) live(region string) []int {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []int
	for i := range g.m.Region(region).Addrs() {
		if !g.killed[region][i] {
			out = append(out, i)
		}
	}
	return out
}

// url returns the live brokers of region for a client.
func (g *geoCluster) url(region string) string {
	addrs := g.m.Region(region).Addrs()
	var out []string
	for _, i := range g.live(region) {
		out = append(out, addrs[i])
	}
	return strings.Join(out, ",")
}

// ownerIndex returns the index of the live broker of region that owns
// topic (-1 if none has it loaded).
func (g *geoCluster) ownerIndex(region, topic string) int {
	for _, i := range g.live(region) {
		if slices.Contains(g.broker(region, i).OwnedTopics(), topic) {
			return i
		}
	}
	return -1
}

// createNamespace creates ns replicated to regions, keeping everything.
func (g *geoCluster) createNamespace(ns string, regions ...string) {
	g.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	adm, err := g.admin(ctx, g.names[0])
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
	adm, err := g.admin(ctx, region)
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
	adm, err := g.admin(ctx, region)
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

	// timeout bounds each send (default 60 s).
	timeout time.Duration

	mu    sync.Mutex
	next  int
	acked map[int]bool
	fails int
}

func (g *geoCluster) producer(region, topic string) *geoProducer {
	g.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := client.New(ctx, g.clientOptions(region))
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
		timeout := gp.timeout
		if timeout == 0 {
			timeout = 60 * time.Second
		}
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
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
	cl, err := client.New(ctx, g.clientOptions(region))
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

// rawSend sends one message to topic in region through a new producer on
// the raw gRPC API and returns the receipt's error (nil when stored).
func (g *geoCluster) rawSend(region, topic string) *clientv1.Error {
	g.t.Helper()
	owner := regiontest.LookupOwner(g.t, strings.Split(g.url(region), ",")[0], topic, func(string) bool { return true })
	e, err := rawSendTo(owner, topic)
	if err != nil {
		g.t.Fatal(err)
	}
	return e
}

// rawSendTo is rawSend to a known owner; it may run on any goroutine.
func rawSendTo(owner, topic string) (*clientv1.Error, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cc, err := grpc.NewClient(owner, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	defer cc.Close()
	st, err := clientv1.NewMeridianClient(cc).Produce(ctx)
	if err != nil {
		return nil, err
	}
	if err := st.Send(&clientv1.ProduceRequest{Kind: &clientv1.ProduceRequest_Open{Open: &clientv1.OpenProducer{Topic: topic}}}); err != nil {
		return nil, err
	}
	if _, err := st.Recv(); err != nil {
		return nil, fmt.Errorf("open producer: %w", err)
	}
	if err := st.Send(&clientv1.ProduceRequest{Kind: &clientv1.ProduceRequest_Send{Send: &clientv1.Send{SequenceId: 0, NumMessages: 1, Payload: []byte("probe")}}}); err != nil {
		return nil, err
	}
	r, err := st.Recv()
	if err != nil {
		return nil, fmt.Errorf("receipt: %w", err)
	}
	return r.GetReceipt().GetError(), nil
}
