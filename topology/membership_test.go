package topology

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// testLogger routes logs to t.Log until the test ends (memberlist goroutines
// may log after that).
func testLogger(t *testing.T) *slog.Logger {
	w := &tWriter{t: t}
	t.Cleanup(func() { w.mu.Lock(); w.done = true; w.mu.Unlock() })
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

type tWriter struct {
	mu   sync.Mutex
	t    *testing.T
	done bool
}

func (w *tWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(strings.TrimSpace(string(p)))
	}
	return len(p), nil
}

func startNode(t *testing.T, name, rack string, reg prometheus.Registerer, seeds ...string) *Membership {
	t.Helper()
	cfg := DefaultMembershipConfig().WithFastFailureDetection()
	cfg.NodeName = name
	cfg.Region = "us"
	cfg.Rack = rack
	cfg.Role = RoleBookie
	cfg.Seeds = seeds
	cfg.Meta = map[string]string{"grpc": name + ":3181"}
	cfg.Logger = testLogger(t)
	cfg.Registerer = reg
	m, err := NewMembership(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Shutdown() })
	return m
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func names(ms []Member) string {
	var out []string
	for _, m := range ms {
		out = append(out, m.Name+"("+string(m.State)+")")
	}
	return strings.Join(out, ",")
}

func startThree(t *testing.T) []*Membership {
	t.Helper()
	a := startNode(t, "a", "r1", prometheus.NewRegistry())
	b := startNode(t, "b", "r2", prometheus.NewRegistry(), a.Addr())
	c := startNode(t, "c", "r3", prometheus.NewRegistry(), a.Addr())
	nodes := []*Membership{a, b, c}
	for _, n := range nodes {
		waitFor(t, 20*time.Second, n.LocalName()+" sees 3 members", func() bool { return len(n.Members()) == 3 })
	}
	return nodes
}

func TestMembershipThreeNodesSeeEachOther(t *testing.T) {
	nodes := startThree(t)
	for _, n := range nodes {
		ms := n.Members()
		if got := names(ms); got != "a(alive),b(alive),c(alive)" {
			t.Fatalf("%s sees %s", n.LocalName(), got)
		}
		for _, m := range ms {
			if m.Region != "us" || m.Role != RoleBookie || m.Meta["grpc"] != m.Name+":3181" || m.Rack == "" || m.Addr == "" {
				t.Fatalf("%s sees bad member %+v", n.LocalName(), m)
			}
		}
	}
	b, _ := nodes[0].Member("b")
	if b.Rack != "r2" {
		t.Fatalf("rack of b = %q", b.Rack)
	}
}

func TestMembershipCrashDetected(t *testing.T) {
	nodes := startThree(t)
	events, cancel := nodes[0].Subscribe(64)
	defer cancel()
	start := time.Now()
	if err := nodes[2].Shutdown(); err != nil { // no leave message: looks like a crash
		t.Fatal(err)
	}
	for _, n := range nodes[:2] {
		waitFor(t, 20*time.Second, n.LocalName()+" declares c dead", func() bool {
			_, ok := n.Member("c")
			return !ok
		})
	}
	t.Logf("crash detected by both survivors after %v", time.Since(start))
	// The subscriber saw c leave as dead, not as a graceful leave.
	deadline := time.After(10 * time.Second)
	for {
		select {
		case ev := <-events:
			if ev.Type == EventLeave && ev.Member.Name == "c" {
				if ev.Member.State != StateDead {
					t.Fatalf("c left with state %s, want dead", ev.Member.State)
				}
				return
			}
		case <-deadline:
			t.Fatal("no leave event for c")
		}
	}
}

func TestMembershipGracefulLeave(t *testing.T) {
	nodes := startThree(t)
	events, cancel := nodes[0].Subscribe(64)
	defer cancel()
	ctx, done := context.WithTimeout(context.Background(), 5*time.Second)
	defer done()
	if err := nodes[1].Leave(ctx); err != nil {
		t.Fatal(err)
	}
	if err := nodes[1].Leave(ctx); !errors.Is(err, ErrMembershipClosed) {
		t.Fatalf("second Leave: %v", err)
	}
	deadline := time.After(20 * time.Second)
	for {
		select {
		case ev := <-events:
			if ev.Type == EventLeave && ev.Member.Name == "b" {
				if ev.Member.State != StateLeft {
					t.Fatalf("b left with state %s, want left", ev.Member.State)
				}
				if names(nodes[0].Members()) != "a(alive),c(alive)" {
					t.Fatalf("members after leave: %s", names(nodes[0].Members()))
				}
				return
			}
		case <-deadline:
			t.Fatal("no leave event for b")
		}
	}
}

func TestMembershipMetaUpdatePropagates(t *testing.T) {
	nodes := startThree(t)
	events, cancel := nodes[2].Subscribe(64)
	defer cancel()
	ctx, done := context.WithTimeout(context.Background(), 5*time.Second)
	defer done()
	if err := nodes[0].UpdateMeta(ctx, map[string]string{"grpc": "a:9999", "state": "read-only"}); err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		waitFor(t, 20*time.Second, n.LocalName()+" sees a's new meta", func() bool {
			m, ok := n.Member("a")
			return ok && m.Meta["grpc"] == "a:9999" && m.Meta["state"] == "read-only" && m.Rack == "r1"
		})
	}
	deadline := time.After(10 * time.Second)
	for {
		select {
		case ev := <-events:
			if ev.Type == EventUpdate && ev.Member.Name == "a" && ev.Member.Meta["grpc"] == "a:9999" {
				return
			}
		case <-deadline:
			t.Fatal("no update event for a")
		}
	}
}

func TestMembershipSubscriberOverflowResyncs(t *testing.T) {
	reg := prometheus.NewRegistry()
	a := startNode(t, "a", "r1", reg)
	events, cancel := a.Subscribe(1)
	b := startNode(t, "b", "r1", prometheus.NewRegistry(), a.Addr())
	c := startNode(t, "c", "r1", prometheus.NewRegistry(), a.Addr())
	waitFor(t, 20*time.Second, "a sees 3 members", func() bool { return len(a.Members()) == 3 })
	first := <-events
	if first.Type != EventJoin {
		t.Fatalf("first event %v", first.Type)
	}
	// One event was dropped (buffer 1, two joins): the next change must
	// first deliver a resync.
	ctx, done := context.WithTimeout(context.Background(), 5*time.Second)
	defer done()
	if err := c.UpdateMeta(ctx, map[string]string{"x": "1"}); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-events:
		if ev.Type != EventResync {
			t.Fatalf("got %v, want resync", ev.Type)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("no resync event")
	}
	_ = b
	cancel()
	if _, ok := <-events; ok {
		// A buffered event may remain; the channel must then be closed.
		if _, ok := <-events; ok {
			t.Fatal("channel not closed after cancel")
		}
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, mf := range mfs {
		if mf.GetName() == "meridian_membership_events_dropped_total" && mf.GetMetric()[0].GetCounter().GetValue() >= 1 {
			found = true
		}
	}
	if !found {
		t.Fatal("dropped events not counted")
	}
}

func TestMembershipConfigValidate(t *testing.T) {
	base := DefaultMembershipConfig()
	base.NodeName, base.Role = "n", RoleBroker
	if err := base.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		mut  func(*MembershipConfig)
		want string
	}{
		{func(c *MembershipConfig) { c.NodeName = "" }, "NodeName"},
		{func(c *MembershipConfig) { c.Role = "x" }, "Role"},
		{func(c *MembershipConfig) { c.BindAddr = "nope" }, "BindAddr"},
		{func(c *MembershipConfig) { c.Profile = "moon" }, "Profile"},
		{func(c *MembershipConfig) { c.ProbeInterval = -1 }, "ProbeInterval"},
		{func(c *MembershipConfig) { c.EventBuffer = 0 }, "EventBuffer"},
		{func(c *MembershipConfig) { c.Meta = map[string]string{"big": strings.Repeat("x", 600)} }, "limit 512"},
	} {
		c := base
		tc.mut(&c)
		err := c.Validate()
		if !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("want error naming %s, got %v", tc.want, err)
		}
	}
	// Oversize metadata at runtime is refused and changes nothing.
	m := startNode(t, "solo", "r1", nil)
	err := m.UpdateMeta(context.Background(), map[string]string{"big": strings.Repeat("x", 600)})
	if !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("err = %v", err)
	}
	if me, _ := m.Member("solo"); me.Meta["grpc"] != "solo:3181" {
		t.Fatalf("meta changed: %v", me.Meta)
	}
	// WAN profile starts too.
	cfg := DefaultMembershipConfig()
	cfg.NodeName, cfg.Role, cfg.Profile = "wan", RoleMeta, ProfileWAN
	w, err := NewMembership(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Shutdown(); err != nil {
		t.Fatal(err)
	}
	_ = fmt.Sprint()
}
