package regiontest

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/meridianmq/meridian/broker"
	"github.com/meridianmq/meridian/chaos"
	"github.com/meridianmq/meridian/metadata"
	"github.com/meridianmq/meridian/metadata/metadatatest"
)

// MultiOptions tune a multi-region test cluster.
type MultiOptions struct {
	// Regions names the regions (at least one; names as broker.ValidateName).
	Regions []string
	// Brokers and Bookies count each region's servers (defaults 2 and 3).
	Brokers, Bookies int
	// Latency and Jitter are the one-way delay added to traffic between
	// every two regions (default 0).
	Latency, Jitter time.Duration
	// Broker edits each broker's config before it starts (and restarts).
	Broker func(region string, i int, cfg *broker.Config)
}

// Multi is a running multi-region test cluster: one metadata node hosting
// the global shard and one regional shard per region, each region's
// bookies and brokers, and a link proxy per (source region, remote
// broker) through which every broker dials the other regions' brokers
// (its DialRewrite), so tests can delay and cut region-to-region links
// with Network.
type Multi struct {
	// Network holds the link proxies: SetLatency, Cut, Heal between regions.
	Network *chaos.Network
	// Meta is the metadata cluster (one node, every shard).
	Meta *metadatatest.Cluster
	// Global is the global shard (regions, tenants, namespaces).
	Global metadata.Store

	names   []string
	regions map[string]*Cluster
	rewrite map[string]map[string]string
}

// StartRegions starts a multi-region cluster and stops it in t.Cleanup.
// Namespace public/default exists (with no replication) when it returns.
func StartRegions(t testing.TB, opts MultiOptions) *Multi {
	t.Helper()
	if len(opts.Regions) == 0 {
		t.Fatal("regiontest: StartRegions needs at least one region")
	}
	if opts.Brokers == 0 {
		opts.Brokers = 2
	}
	if opts.Bookies == 0 {
		opts.Bookies = 3
	}
	seen := map[string]bool{}
	for _, r := range opts.Regions {
		if err := broker.ValidateName("region", r); err != nil || seen[r] || r == metadata.GlobalShard {
			t.Fatalf("regiontest: region name %q: invalid or repeated (%v)", r, err)
		}
		seen[r] = true
	}
	shards := append([]string{metadata.GlobalShard}, opts.Regions...)
	mc := metadatatest.StartClusterWith(t, 1, metadatatest.Options{Shards: shards})
	m := &Multi{Network: chaos.NewNetwork(nil), Meta: mc, Global: mc.Store(0, metadata.GlobalShard),
		names: append([]string(nil), opts.Regions...), regions: map[string]*Cluster{}}
	// Registered before the regions' cleanups: runs after every broker
	// stopped.
	t.Cleanup(m.Network.Close)
	// Reserve every broker's gRPC address first, so that the proxies can
	// point at them before the brokers start.
	// The listeners stay open until each broker takes its own, so no other
	// process (tests run packages in parallel) can take the port between.
	addrs := map[string][]string{}
	liss := map[string][]net.Listener{}
	for _, r := range opts.Regions {
		for range opts.Brokers {
			lis, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatalf("regiontest: reserve a broker address: %v", err)
			}
			addrs[r] = append(addrs[r], lis.Addr().String())
			liss[r] = append(liss[r], lis)
		}
	}
	rewrite := map[string]map[string]string{}
	for _, from := range opts.Regions {
		rewrite[from] = map[string]string{}
		for _, to := range opts.Regions {
			if to == from {
				continue
			}
			if err := m.Network.SetLatency(from, to, opts.Latency, opts.Jitter); err != nil {
				t.Fatalf("regiontest: latency %s→%s: %v", from, to, err)
			}
			for _, target := range addrs[to] {
				p, err := m.Network.Proxy(from, to, "127.0.0.1:0", target)
				if err != nil {
					t.Fatalf("regiontest: proxy %s→%s %s: %v", from, to, target, err)
				}
				rewrite[from][target] = p.Addr()
			}
		}
	}
	m.rewrite = rewrite
	for _, r := range opts.Regions {
		c := &Cluster{t: t, Global: m.Global, Regional: mc.Store(0, r), region: r, idPrefix: r + "-broker-",
			grpcAddrs: addrs[r], grpcLis: liss[r], rewrite: rewrite[r],
			opts: Options{Brokers: opts.Brokers, Bookies: opts.Bookies}}
		if opts.Broker != nil {
			c.opts.Broker = func(i int, cfg *broker.Config) { opts.Broker(r, i, cfg) }
		}
		c.start()
		m.regions[r] = c
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := m.regions[opts.Regions[0]].Broker(0).EnsureDefaultNamespace(ctx); err != nil {
		t.Fatalf("regiontest: default namespace: %v", err)
	}
	return m
}

// Regions returns the region names in the order given.
func (m *Multi) Regions() []string { return append([]string(nil), m.names...) }

// Region returns region name's cluster (brokers, Kill, Restart, Unload,
// Bookies); it panics on an unknown name.
func (m *Multi) Region(name string) *Cluster {
	c, ok := m.regions[name]
	if !ok {
		panic(fmt.Sprintf("regiontest: no region %q", name))
	}
	return c
}

// DialAddr returns the address region from's brokers dial to reach addr:
// the link proxy from→(addr's region) for another region's broker, addr
// itself otherwise. Tests use it to reach a region as another region's
// broker would (through the Network).
func (m *Multi) DialAddr(from, addr string) string {
	if to, ok := m.rewrite[from][addr]; ok {
		return to
	}
	return addr
}
