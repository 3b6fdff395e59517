package broker_test

import (
	"context"
	"net"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/meridianmq/meridian/broker"
	"github.com/meridianmq/meridian/chaos"
	"github.com/meridianmq/meridian/region/regiontest"
	"gopkg.in/yaml.v3"
)

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

func waitUntil(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func startPool(t *testing.T, region, bind string, rewrite map[string]string, seeds ...string) *broker.WANPool {
	t.Helper()
	p, err := broker.StartWANPool(broker.WANPoolConfig{
		Name: region + "/b0", Region: region,
		WAN:         broker.WANConfig{BindAddress: bind, Seeds: seeds, FastFailureDetection: true},
		DialRewrite: rewrite,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// TestWANPoolRegionHealth runs two regions' WAN pools through link
// proxies (the brokers' dial_rewrite): each sees the other region
// reachable; a cut makes it unreachable with a last-seen time from before
// the cut was detected; the heal makes it reachable again.
func TestWANPoolRegionHealth(t *testing.T) {
	nw := chaos.NewNetwork(nil)
	t.Cleanup(nw.Close)
	addrA, addrB := freeAddr(t), freeAddr(t)
	ab, err := nw.Proxy("a", "b", "127.0.0.1:0", addrB)
	if err != nil {
		t.Fatal(err)
	}
	ba, err := nw.Proxy("b", "a", "127.0.0.1:0", addrA)
	if err != nil {
		t.Fatal(err)
	}
	a := startPool(t, "a", addrA, map[string]string{addrB: ab.Addr()}, addrB)
	b := startPool(t, "b", addrB, map[string]string{addrA: ba.Addr()}, addrA)
	var src broker.RegionHealthSource = a // the shape `admin regions list` uses

	reachable := func(p broker.RegionHealthSource, r string) bool { ok, _, _ := p.Region(r); return ok }
	waitUntil(t, 20*time.Second, "a and b reachable to each other", func() bool { return reachable(src, "b") && reachable(b, "a") })
	if ok, seen, known := a.Region("a"); !ok || !known || time.Since(seen) > time.Minute {
		t.Fatalf("own region: reachable %v, last seen %v, known %v", ok, seen, known)
	}
	if _, _, known := a.Region("nowhere"); known {
		t.Fatal("a region no member ever belonged to is reported as known")
	}

	nw.Cut("a", "b", false)
	cutAt := time.Now()
	waitUntil(t, 20*time.Second, "b unreachable from a", func() bool { return !reachable(src, "b") })
	// The pool notes the departure (last seen) from the membership event,
	// which its watcher may handle a moment after the member list changed.
	waitUntil(t, 10*time.Second, "b's departure noted", func() bool { _, seen, _ := src.Region("b"); return !seen.IsZero() })
	ok, seen, known := src.Region("b")
	if ok || !known || seen.Before(cutAt) || seen.After(time.Now()) {
		t.Fatalf("after the cut: reachable %v, last seen %v (cut at %v), known %v", ok, seen, cutAt, known)
	}
	time.Sleep(50 * time.Millisecond)
	if _, seen2, _ := src.Region("b"); !seen2.Equal(seen) {
		t.Fatalf("last seen of an unreachable region moved from %v to %v", seen, seen2)
	}
	if got := a.Regions(); len(got) != 2 || got[0] != "a" || got[1] != "b" {
		t.Fatalf("regions known to a: %v", got)
	}

	nw.Heal("a", "b")
	waitUntil(t, 20*time.Second, "a and b reachable again after the heal", func() bool { return reachable(src, "b") && reachable(b, "a") })
}

// TestBrokerWANPoolFromRegistry starts brokers with a WAN pool and no
// seeds: they find each other through the WAN addresses they record in the
// global region registry.
func TestBrokerWANPoolFromRegistry(t *testing.T) {
	c := regiontest.Start(t, regiontest.Options{Brokers: 2, Bookies: 1, Broker: func(i int, cfg *broker.Config) {
		cfg.WAN = broker.WANConfig{BindAddress: "127.0.0.1:0", FastFailureDetection: true, DiscoverInterval: 100 * time.Millisecond}
	}})
	b0, b1 := c.Broker(0), c.Broker(1)
	for _, b := range []*broker.Server{b0, b1} {
		waitUntil(t, 20*time.Second, "both brokers in "+b.ID()+"'s WAN pool", func() bool { return len(b.WANPool().Members()) == 2 })
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rec, err := b0.RegionInfo(ctx, regiontest.Region)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range []*broker.Server{b0, b1} {
		if got := rec.Brokers[b.ID()].WAN; got != b.WANPool().Addr() {
			t.Fatalf("registry records WAN %q for %s, want %q", got, b.ID(), b.WANPool().Addr())
		}
	}
	if ok, _, known := b1.RegionHealth(regiontest.Region); !ok || !known {
		t.Fatalf("RegionHealth(%q) = %v, known %v", regiontest.Region, ok, known)
	}
	if _, _, known := b1.RegionHealth("elsewhere"); known {
		t.Fatal("RegionHealth of an unknown region says known")
	}
	for _, m := range b0.WANPool().Members() {
		if m.Region != regiontest.Region || m.Meta["grpc"] == "" {
			t.Fatalf("WAN member %+v lacks its region or gRPC address", m)
		}
	}
}

// TestWANConfigValidation checks that a bad wan section is refused with
// the field named.
func TestWANConfigValidation(t *testing.T) {
	for _, tc := range []struct {
		wan  broker.WANConfig
		want string
	}{
		{broker.WANConfig{BindAddress: "nope"}, "wan.bind_address"},
		{broker.WANConfig{BindAddress: "127.0.0.1:0", AdvertiseAddress: "x"}, "wan.advertise_address"},
		{broker.WANConfig{BindAddress: "127.0.0.1:0", Seeds: []string{"127.0.0.1:1", "bad"}}, "wan.seeds[1]"},
		{broker.WANConfig{BindAddress: "127.0.0.1:0", DiscoverInterval: -time.Second}, "wan.discover_interval"},
	} {
		_, err := broker.StartWANPool(broker.WANPoolConfig{Name: "x", Region: "a", WAN: tc.wan})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: err %v, want one naming %s", tc.wan, err, tc.want)
		}
	}
}

// TestWANConfigYAML decodes the yaml keys `meridian dev` writes.
func TestWANConfigYAML(t *testing.T) {
	body := `
dial_rewrite: {"127.0.0.1:7001": "127.0.0.1:9001"}
wan:
  bind_address: 127.0.0.1:7000
  advertise_address: 127.0.0.1:7000
  seeds: ["127.0.0.1:7001"]
  fast_failure_detection: true
  discover_interval: 2s
`
	cfg := broker.DefaultConfig()
	dec := yaml.NewDecoder(strings.NewReader(body))
	dec.KnownFields(true)
	if err := dec.Decode(&cfg); err != nil {
		t.Fatal(err)
	}
	want := broker.WANConfig{BindAddress: "127.0.0.1:7000", AdvertiseAddress: "127.0.0.1:7000", Seeds: []string{"127.0.0.1:7001"},
		FastFailureDetection: true, DiscoverInterval: 2 * time.Second}
	if !reflect.DeepEqual(cfg.WAN, want) || cfg.DialRewrite["127.0.0.1:7001"] != "127.0.0.1:9001" {
		t.Fatalf("decoded wan %+v, dial_rewrite %v", cfg.WAN, cfg.DialRewrite)
	}
}
