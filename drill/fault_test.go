//go:build unix

package drill

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/meridianmq/meridian/chaos"
	"github.com/meridianmq/meridian/region"
)

// recordingControl is an in-memory twin of the dev control API: it keeps
// the processes' states and records every request, so that the order of a
// fault's requests can be checked. The real API is exercised end to end by
// cmd/meridian's TestDrillFailover.
type recordingControl struct {
	mu       sync.Mutex
	st       region.DevStatus
	calls    []string
	failures map[string]int // start failures left per process name
}

func newRecordingControl() *recordingControl {
	c := &recordingControl{failures: map[string]int{}}
	for _, r := range []string{"a", "b", "c"} {
		for _, role := range []struct {
			name string
			n    int
		}{{region.RoleMeta, 1}, {region.RoleBookie, 2}, {region.RoleBroker, 2}} {
			for i := range role.n {
				p := region.DevProcessStatus{Role: role.name, Region: r, Index: i}
				p.Name = fmt.Sprintf("%s/%s-%d", r, role.name, i)
				p.State = "running"
				c.st.Processes = append(c.st.Processes, p)
			}
		}
	}
	return c
}

func (c *recordingControl) Status(context.Context) (region.DevStatus, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.st
	st.Processes = slices.Clone(c.st.Processes)
	return st, nil
}

func (c *recordingControl) Link(_ context.Context, req region.DevLinkRequest) (region.DevStatus, error) {
	c.mu.Lock()
	c.calls = append(c.calls, fmt.Sprintf("link %s %s-%s", req.Op, req.A, req.B))
	c.mu.Unlock()
	return c.Status(context.Background())
}

func (c *recordingControl) Process(_ context.Context, req region.DevProcessRequest) (region.DevStatus, error) {
	c.mu.Lock()
	name := fmt.Sprintf("%s/%s-%d", req.Region, req.Role, req.Index)
	call := fmt.Sprintf("%s %s %s", req.Op, req.Signal, name)
	c.calls = append(c.calls, strings.Join(strings.Fields(call), " "))
	var err error
	for i := range c.st.Processes {
		p := &c.st.Processes[i]
		if p.Name != name {
			continue
		}
		switch {
		case req.Op == "kill" && req.Signal == "KILL":
			p.State = "exited"
		case req.Op == "kill" && req.Signal == "STOP":
			p.State = "paused"
		case req.Op == "kill" && req.Signal == "CONT":
			p.State = "running"
		case req.Op == "start" && c.failures[name] > 0:
			c.failures[name]--
			err = errors.New("process exited before it was ready")
		case req.Op == "start":
			p.State = "running"
		}
	}
	c.mu.Unlock()
	st, _ := c.Status(context.Background())
	return st, err
}

// callsMatching returns the recorded calls that start with prefix, in
// order.
func (c *recordingControl) callsMatching(prefix string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, x := range c.calls {
		if strings.HasPrefix(x, prefix) {
			out = append(out, x)
		}
	}
	return out
}

func TestFaultKillRegion(t *testing.T) {
	ctl := newRecordingControl()
	ctl.failures["a/meta-0"] = 2 // the heal retries a failed restart
	f := &fault{kind: FaultKillRegion, region: "a", ctl: ctl, log: slog.New(slog.DiscardHandler)}
	if err := f.inject(context.Background()); err != nil {
		t.Fatal(err)
	}
	kills := ctl.callsMatching("kill")
	slices.Sort(kills)
	want := []string{"kill KILL a/bookie-0", "kill KILL a/bookie-1", "kill KILL a/broker-0", "kill KILL a/broker-1", "kill KILL a/meta-0"}
	if !slices.Equal(kills, want) {
		t.Fatalf("kill-region sent %v, want %v (every process of a, nothing else)", kills, want)
	}
	if err := f.heal(context.Background()); err != nil {
		t.Fatal(err)
	}
	starts := ctl.callsMatching("start")
	// Metadata first (three attempts), then the bookies, then the brokers.
	if len(starts) != 7 || starts[0] != "start a/meta-0" || starts[2] != "start a/meta-0" ||
		!strings.Contains(strings.Join(starts[3:5], " "), "bookie") || !strings.Contains(strings.Join(starts[5:], " "), "broker") {
		t.Fatalf("heal started %v: want a/meta-0 (3 attempts), then a's bookies, then a's brokers", starts)
	}
	st, _ := ctl.Status(context.Background())
	for _, p := range st.Processes {
		if p.State != "running" {
			t.Fatalf("after heal: %s is %s", p.Name, p.State)
		}
	}
}

func TestFaultKillRegionHealGivesUp(t *testing.T) {
	ctl := newRecordingControl()
	ctl.failures["a/bookie-1"] = maxStartAttempts
	f := &fault{kind: FaultKillRegion, region: "a", ctl: ctl, log: slog.New(slog.DiscardHandler)}
	if err := f.inject(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // no waiting between attempts: the first failure ends it
	err := f.heal(ctx)
	if err == nil || !strings.Contains(err.Error(), "a/bookie-1") {
		t.Fatalf("heal with a bookie that never starts: %v, want an error naming a/bookie-1", err)
	}
	if n := len(ctl.callsMatching("start a/broker")); n != 0 {
		t.Fatalf("brokers started (%d) although a bookie did not", n)
	}
}

func TestFaultPauseBrokers(t *testing.T) {
	ctl := newRecordingControl()
	f := &fault{kind: FaultPauseBrokers, region: "b", ctl: ctl, log: slog.New(slog.DiscardHandler)}
	if err := f.inject(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := f.heal(context.Background()); err != nil {
		t.Fatal(err)
	}
	calls := ctl.callsMatching("kill")
	slices.Sort(calls)
	want := []string{"kill CONT b/broker-0", "kill CONT b/broker-1", "kill STOP b/broker-0", "kill STOP b/broker-1"}
	if !slices.Equal(calls, want) {
		t.Fatalf("pause-brokers sent %v, want %v", calls, want)
	}
}

func TestFaultCutLinks(t *testing.T) {
	ctl := newRecordingControl()
	net := chaos.NewNetwork(nil)
	defer net.Close()
	f := &fault{kind: FaultCutLinks, region: "a", ctl: ctl, log: slog.New(slog.DiscardHandler), net: net}
	if err := f.inject(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !net.IsCut(clientsNode, "a") || !net.IsCut("a", clientsNode) {
		t.Fatal("cut-links left the clients' path to a open")
	}
	if got := ctl.callsMatching("link"); !slices.Equal(got, []string{"link cut a-b", "link cut a-c"}) {
		t.Fatalf("cut-links: %v, want a cut from b and c", got)
	}
	if err := f.heal(context.Background()); err != nil {
		t.Fatal(err)
	}
	if net.IsCut(clientsNode, "a") || net.IsCut("a", clientsNode) {
		t.Fatal("heal left the clients' path to a cut")
	}
	if got := ctl.callsMatching("link heal"); !slices.Equal(got, []string{"link heal a-b", "link heal a-c"}) {
		t.Fatalf("heal: %v", got)
	}
	if got := ctl.callsMatching("kill"); len(got) != 0 {
		t.Fatalf("cut-links signalled processes: %v", got)
	}
}
