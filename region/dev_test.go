//go:build unix

package region

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meridianmq/meridian/metadata"
)

func devTestConfig(dir string) DevConfig {
	cfg := DefaultDevConfig()
	cfg.Binary, cfg.DataDir, cfg.Regions = "/bin/true", dir, []string{"a", "b", "c"}
	return cfg
}

// TestDevConfigValidate: bad flags are refused naming the flag and limit.
func TestDevConfigValidate(t *testing.T) {
	ok := devTestConfig(t.TempDir())
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []struct {
		edit func(c *DevConfig)
		want string
	}{
		{func(c *DevConfig) { c.Regions = nil }, "--regions lists 0 regions"},
		{func(c *DevConfig) { c.Regions = []string{"a", "A"} }, `region "A"`},
		{func(c *DevConfig) { c.Regions = []string{"a", "global"} }, `region "global"`},
		{func(c *DevConfig) { c.Regions = []string{"a", "a"} }, `region "a" is repeated`},
		{func(c *DevConfig) { c.Regions = strings.Split("a,b,c,d,e,f,g,h,i,j", ",") }, "want 1 to 9"},
		{func(c *DevConfig) { c.Bookies = 0 }, "--bookies 0 must be in [1, 9]"},
		{func(c *DevConfig) { c.Brokers = 10 }, "--brokers 10"},
		{func(c *DevConfig) { c.Racks = 4 }, "--racks 4 must be in [1, --bookies 3]"},
		{func(c *DevConfig) { c.WANLatency = -time.Millisecond }, "--wan-latency"},
		{func(c *DevConfig) { c.Jitter = 2 * time.Minute }, "--jitter"},
		{func(c *DevConfig) { c.DataDir = "" }, "--data-dir"},
	} {
		c := ok
		bad.edit(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Fatalf("Validate: %v, want an error mentioning %q", err, bad.want)
		}
	}
}

// TestDevPlanLayout: a fresh plan gives every process its own ports, one
// metadata node per region hosting the global shard (all regions) and its
// region's shard (itself), bookies over the racks and a proxy per (source
// region, remote endpoint); the configs written load as their commands
// load them.
func TestDevPlanLayout(t *testing.T) {
	cfg := devTestConfig(t.TempDir())
	plan, err := newDevPlan(cfg)
	if err != nil {
		t.Fatal(err)
	}
	plan.closeListeners() // as after the process that picked them exited
	seen := map[string]string{plan.Control: "control"}
	use := func(who, a string) {
		if prev, dup := seen[a]; dup {
			t.Fatalf("%s and %s both use %s", who, prev, a)
		}
		seen[a] = who
	}
	for _, r := range plan.Regions {
		for _, m := range r.Meta {
			use(m.ID+" raft", m.Raft)
			use(m.ID+" grpc", m.GRPC)
			use(m.ID+" http", m.HTTP)
		}
		racks := map[string]int{}
		for _, b := range append(append([]DevNodePlan{}, r.Bookies...), r.Brokers...) {
			use(b.ID+" grpc", b.GRPC)
			use(b.ID+" http", b.HTTP)
			if b.WAN != "" {
				use(b.ID+" wan", b.WAN)
			}
			if b.Rack != "" {
				racks[b.Rack]++
			}
		}
		if len(r.Bookies) != 3 || len(r.Brokers) != 2 || len(racks) != 2 {
			t.Fatalf("region %s: %d bookies on racks %v, %d brokers", r.Name, len(r.Bookies), racks, len(r.Brokers))
		}
	}
	// Region links, per source region: 2 remote regions × (1 raft + 2
	// brokers × 3). Process links, per region: 2 brokers × (1 meta + 3
	// bookies + 1 other broker) + 3 bookies × (1 meta + 2 other bookies).
	if want := 3*2*(1+2*3) + 3*(2*5+3*3); len(plan.Proxies) != want {
		t.Fatalf("%d proxies, want %d", len(plan.Proxies), want)
	}
	for _, x := range plan.Proxies {
		use("proxy "+x.From+"→"+x.To, x.Listen)
		if x.From == x.To {
			t.Fatalf("proxy to itself: %+v", x)
		}
	}

	d := &Dev{cfg: cfg, plan: plan}
	if err := d.writeConfigs(); err != nil {
		t.Fatal(err)
	}
	if len(d.procs) != 3*(1+3+2) || d.procs[0].role != RoleMeta || d.procs[len(d.procs)-1].role != RoleBroker {
		t.Fatalf("%d processes, first %s, last %s", len(d.procs), d.procs[0].role, d.procs[len(d.procs)-1].role)
	}
	mc, err := metadata.LoadNodeConfig(filepath.Join(cfg.DataDir, "b", "meta-0.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(mc.Shards) != 2 || mc.Shards[0].Name != metadata.GlobalShard || len(mc.Shards[0].Members) != 3 ||
		mc.Shards[1].Name != "b" || len(mc.Shards[1].Members) != 1 || mc.Shards[1].Members[mc.NodeID] != mc.RaftAddress {
		t.Fatalf("b's metadata shards: %+v", mc.Shards)
	}
	// b's node dials a's and c's Raft addresses through b's proxies.
	if len(mc.RaftDialRewrite) != 2 || mc.RaftTransport != metadata.RaftTransportMeridian {
		t.Fatalf("raft_dial_rewrite %v", mc.RaftDialRewrite)
	}
	for _, x := range plan.Proxies {
		if x.Kind == "raft" && x.From == "b" && mc.RaftDialRewrite[x.Target] != x.Listen {
			t.Fatalf("raft_dial_rewrite %v misses proxy %+v", mc.RaftDialRewrite, x)
		}
	}
	broker, err := os.ReadFile(filepath.Join(cfg.DataDir, "a", "broker-1.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"dial_rewrite:", "bind_address: " + plan.Regions[0].Brokers[1].WAN, "fast_failure_detection: true", "default_ensemble_size: 3", "default_write_quorum: 2", "region: a", "a-broker-1"} {
		if !strings.Contains(string(broker), want) {
			t.Fatalf("a/broker-1.yaml lacks %q:\n%s", want, broker)
		}
	}
}

// TestDevPlanReload: a restart keeps the recorded layout, moves ports that
// are taken now (except Raft addresses, recorded in the metadata data),
// and refuses flags that differ from the recorded layout.
func TestDevPlanReload(t *testing.T) {
	cfg := devTestConfig(t.TempDir())
	plan, err := newDevPlan(cfg)
	if err != nil {
		t.Fatal(err)
	}
	plan.closeListeners() // as after the process that picked them exited
	path := filepath.Join(cfg.DataDir, DevPlanFile)
	if err := writePlan(path, plan); err != nil {
		t.Fatal(err)
	}
	// Hold a broker's gRPC port: it moves, and the proxies to it follow.
	taken := plan.Regions[1].Brokers[0].GRPC
	l, err := net.Listen("tcp", taken)
	if err != nil {
		t.Fatal(err)
	}
	got, err := loadDevPlan(cfg, path, nil)
	if got != nil {
		got.closeListeners()
	}
	l.Close()
	if err != nil {
		t.Fatal(err)
	}
	if got.Regions[1].Brokers[0].GRPC == taken || got.Regions[1].Brokers[0].HTTP != plan.Regions[1].Brokers[0].HTTP ||
		got.Regions[0].Meta[0].Raft != plan.Regions[0].Meta[0].Raft || got.Control != plan.Control {
		t.Fatalf("reload with %s taken: %+v", taken, got.Regions[1].Brokers)
	}
	for _, x := range got.Proxies {
		if x.Target == taken {
			t.Fatalf("proxy still targets the old address: %+v", x)
		}
	}
	// A taken Raft address is an error naming it.
	raft := plan.Regions[2].Meta[0].Raft
	if l, err = net.Listen("tcp", raft); err != nil {
		t.Fatal(err)
	}
	_, err = loadDevPlan(cfg, path, nil)
	l.Close()
	if err == nil || !strings.Contains(err.Error(), "c-meta-0 raft address "+raft) {
		t.Fatalf("reload with the raft address taken: %v", err)
	}
	for _, bad := range []struct {
		edit func(c *DevConfig)
		want string
	}{
		{func(c *DevConfig) { c.Regions = []string{"a", "b"} }, "--regions a,b differs from a,b,c"},
		{func(c *DevConfig) { c.Bookies = 1; c.Racks = 1 }, "--bookies 1 differs from 3"},
		{func(c *DevConfig) { c.Brokers = 1 }, "--brokers 1 differs from 2"},
		{func(c *DevConfig) { c.Racks = 3 }, "--racks 3 differs from 2"},
	} {
		c := cfg
		bad.edit(&c)
		if _, err := loadDevPlan(c, path, nil); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Fatalf("reload: %v, want an error mentioning %q", err, bad.want)
		}
	}
}

// TestDevPlanHoldsOwnPorts: the ports the dev process serves itself
// (control, link proxies) stay bound from the pick to the serve, so that
// nothing else on the machine can take them in between; the processes'
// ports are released for them to bind.
func TestDevPlanHoldsOwnPorts(t *testing.T) {
	cfg := devTestConfig(t.TempDir())
	plan, err := newDevPlan(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer plan.closeListeners()
	own := []string{plan.Control}
	for _, x := range plan.Proxies {
		own = append(own, x.Listen)
	}
	for _, a := range own {
		if l, err := net.Listen("tcp", a); err == nil {
			l.Close()
			t.Fatalf("%s was released before the dev process serves it", a)
		}
	}
	b := plan.Regions[0].Brokers[0].GRPC
	l, err := net.Listen("tcp", b)
	if err != nil {
		t.Fatalf("broker port %s still held: %v", b, err)
	}
	l.Close()
	for _, a := range own {
		l := plan.takeListener(a)
		if l == nil {
			t.Fatalf("no held listener for %s", a)
		}
		l.Close()
	}
}
