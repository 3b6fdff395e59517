package topology

import (
	"net"
	"strings"
	"testing"
	"time"

	"github.com/meridianmq/meridian/chaos"
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

// startWAN starts a WAN member of region name on bind, dialing through
// rewrite and joining seeds.
func startWAN(t *testing.T, name, bind string, rewrite map[string]string, seeds ...string) *Membership {
	t.Helper()
	m, err := tryStartWAN(t, name, bind, rewrite, seeds...)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// tryStartWAN is startWAN returning the error (a reserved port may have
// been taken by another test process meanwhile).
func tryStartWAN(t *testing.T, name, bind string, rewrite map[string]string, seeds ...string) (*Membership, error) {
	t.Helper()
	cfg := DefaultMembershipConfig().WithFastFailureDetection()
	cfg.NodeName = name
	cfg.Region = name
	cfg.Role = RoleBroker
	cfg.Profile = ProfileWAN
	cfg.BindAddr = bind
	cfg.DialRewrite = rewrite
	cfg.Seeds = seeds
	cfg.Logger = testLogger(t)
	m, err := NewMembership(cfg)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { _ = m.Shutdown() })
	return m, nil
}

func alive(m *Membership, name string) bool {
	_, ok := m.Member(name)
	return ok
}

// TestTCPTransportThroughLinkProxy runs two WAN members whose gossip
// (packets and streams) goes only through chaos link proxies: they see each
// other alive; a cut makes each declare the other failed; after the heal
// they are alive to each other again.
func TestTCPTransportThroughLinkProxy(t *testing.T) {
	nw := chaos.NewNetwork(nil)
	t.Cleanup(nw.Close)
	// freeAddr frees its port at once: another test process may bind it
	// before the member does; then start over on new ports.
	var a, b *Membership
	var addrA, addrB string
	for attempt := 1; ; attempt++ {
		addrA, addrB = freeAddr(t), freeAddr(t)
		ab, err := nw.Proxy("a", "b", "127.0.0.1:0", addrB)
		if err != nil {
			t.Fatal(err)
		}
		ba, err := nw.Proxy("b", "a", "127.0.0.1:0", addrA)
		if err != nil {
			t.Fatal(err)
		}
		a, err = tryStartWAN(t, "a", addrA, map[string]string{addrB: ab.Addr()}, addrB)
		if err == nil {
			if b, err = tryStartWAN(t, "b", addrB, map[string]string{addrA: ba.Addr()}, addrA); err != nil {
				_ = a.Shutdown()
			}
		}
		if err == nil {
			break
		}
		ab.Close()
		ba.Close()
		if attempt == 5 || !strings.Contains(err.Error(), "address already in use") {
			t.Fatal(err)
		}
	}
	if a.Addr() != addrA || b.Addr() != addrB {
		t.Fatalf("advertised %s and %s, want the bound %s and %s", a.Addr(), b.Addr(), addrA, addrB)
	}

	both := func() bool { return alive(a, "b") && alive(b, "a") }
	waitFor(t, 20*time.Second, "a and b alive to each other", both)
	if m, _ := a.Member("b"); m.Region != "b" || m.Addr != addrB {
		t.Fatalf("a sees b as %+v", m)
	}

	nw.Cut("a", "b", false)
	start := time.Now()
	waitFor(t, 20*time.Second, "a and b to declare each other failed", func() bool { return !alive(a, "b") && !alive(b, "a") })
	t.Logf("failure detected through the cut in %v", time.Since(start))

	nw.Heal("a", "b")
	start = time.Now()
	waitFor(t, 20*time.Second, "a and b alive again after the heal", both)
	t.Logf("alive again %v after the heal", time.Since(start))
}

// TestTCPTransportOneWayCut checks that a cut in one direction is enough
// for failure detection (acks cannot come back) and heals the same way.
func TestTCPTransportOneWayCut(t *testing.T) {
	nw := chaos.NewNetwork(nil)
	t.Cleanup(nw.Close)
	addrA, addrB := freeAddr(t), freeAddr(t)
	ab, _ := nw.Proxy("a", "b", "127.0.0.1:0", addrB)
	ba, _ := nw.Proxy("b", "a", "127.0.0.1:0", addrA)
	a := startWAN(t, "a", addrA, map[string]string{addrB: ab.Addr()}, addrB)
	b := startWAN(t, "b", addrB, map[string]string{addrA: ba.Addr()}, addrA)
	both := func() bool { return alive(a, "b") && alive(b, "a") }
	waitFor(t, 20*time.Second, "a and b alive to each other", both)
	nw.Cut("a", "b", true)
	waitFor(t, 20*time.Second, "a to declare b failed", func() bool { return !alive(a, "b") })
	nw.Heal("a", "b")
	waitFor(t, 20*time.Second, "a and b alive again after the heal", both)
}
