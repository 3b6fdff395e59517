package bookie_test

import (
	"testing"
	"time"

	"github.com/meridianmq/meridian/bookie/bookietest"
	"github.com/meridianmq/meridian/topology"
)

// Bookies join gossip; a killed bookie is declared dead within seconds, a
// stopped one is seen leaving, and a restarted one is alive again.
func TestGossipLiveness(t *testing.T) {
	c := bookietest.StartCluster(t, 3, bookietest.WithGossip())
	m0 := c.Server(0).Membership()
	alive := func(i int) bool { _, ok := m0.Member(c.ID(i)); return ok }
	waitFor(t, 20*time.Second, "all alive", func() bool { return alive(1) && alive(2) })
	if mem, _ := m0.Member(c.ID(2)); mem.Meta["addr"] != c.Addr(2) || mem.Role != topology.RoleBookie || mem.Rack != "rack-2" {
		t.Fatalf("member 2: %+v", mem)
	}
	events, cancel := m0.Subscribe(64)
	defer cancel()
	final := map[string]topology.MemberState{}
	waitEvent := func(name string, want topology.MemberState) {
		t.Helper()
		deadline := time.After(20 * time.Second)
		for final[name] != want {
			select {
			case ev := <-events:
				if ev.Type == topology.EventLeave {
					final[ev.Member.Name] = ev.Member.State
				}
			case <-deadline:
				t.Fatalf("no %s event for %s", want, name)
			}
		}
	}
	start := time.Now()
	c.Kill(2)
	waitEvent(c.ID(2), topology.StateDead)
	t.Logf("killed bookie declared dead after %s", time.Since(start))
	c.Stop(1)
	waitEvent(c.ID(1), topology.StateLeft)
	if alive(1) || alive(2) {
		t.Fatal("stopped bookies still listed")
	}
	if err := c.Restart(2); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "bookie 2 alive again", func() bool { return alive(2) })
}
