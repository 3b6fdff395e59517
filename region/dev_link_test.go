//go:build unix

package region

import (
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/meridianmq/meridian/chaos"
	"gopkg.in/yaml.v3"
)

// TestDevPlanProcessLinks: every connection a process opens to another
// process of its region has its own proxy, and the process's config
// dials it through dial_rewrite.
func TestDevPlanProcessLinks(t *testing.T) {
	cfg := devTestConfig(t.TempDir())
	plan, err := newDevPlan(cfg)
	if err != nil {
		t.Fatal(err)
	}
	plan.closeListeners() // as after the process that picked them exited
	links := map[string]DevProxyPlan{}
	for _, x := range plan.Proxies {
		if strings.Contains(x.From, "/") {
			links[x.From+">"+x.To] = x
			if x.Kind != "grpc" || !strings.HasPrefix(x.To, strings.Split(x.From, "/")[0]+"/") {
				t.Fatalf("process link %+v", x)
			}
		}
	}
	a := plan.Regions[0]
	for _, want := range []struct{ from, to, target string }{
		{"a/broker-0", "a/meta-0", a.Meta[0].GRPC},
		{"a/broker-0", "a/bookie-2", a.Bookies[2].GRPC},
		{"a/broker-1", "a/broker-0", a.Brokers[0].GRPC},
		{"a/bookie-1", "a/meta-0", a.Meta[0].GRPC},
		{"a/bookie-1", "a/bookie-0", a.Bookies[0].GRPC},
	} {
		if x, ok := links[want.from+">"+want.to]; !ok || x.Target != want.target {
			t.Fatalf("link %s>%s: %+v (have %v)", want.from, want.to, x, ok)
		}
	}
	for _, no := range []string{"a/meta-0>a/bookie-0", "a/bookie-0>a/broker-0", "a/broker-0>b/bookie-0", "a/bookie-0>a/bookie-0"} {
		if _, ok := links[no]; ok {
			t.Fatalf("unexpected link %s", no)
		}
	}

	d := &Dev{cfg: cfg, plan: plan}
	if err := d.writeConfigs(); err != nil {
		t.Fatal(err)
	}
	read := func(name string) map[string]any {
		b, err := os.ReadFile(filepath.Join(cfg.DataDir, name))
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := yaml.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	bk := read("a/bookie-1.yaml")["dial_rewrite"].(map[string]any)
	if len(bk) != 3 || bk[a.Meta[0].GRPC] != links["a/bookie-1>a/meta-0"].Listen || bk[a.Bookies[2].GRPC] != links["a/bookie-1>a/bookie-2"].Listen {
		t.Fatalf("a/bookie-1 dial_rewrite %v", bk)
	}
	br := read("a/broker-0.yaml")["broker"].(map[string]any)["dial_rewrite"].(map[string]any)
	// 5 process links + the region links to b's and c's brokers (3 each × 2).
	if len(br) != 5+2*2*3 || br[a.Bookies[0].GRPC] != links["a/broker-0>a/bookie-0"].Listen || br[a.Brokers[1].GRPC] != links["a/broker-0>a/broker-1"].Listen {
		t.Fatalf("a/broker-0 dial_rewrite %v", br)
	}
	if br[plan.Regions[1].Brokers[0].GRPC] == nil {
		t.Fatalf("a/broker-0 lost its region links: %v", br)
	}
}

// TestDevPlanReloadAddsProcessLinks: a dev.json recorded before process
// links existed gets them on restart.
func TestDevPlanReloadAddsProcessLinks(t *testing.T) {
	cfg := devTestConfig(t.TempDir())
	plan, err := newDevPlan(cfg)
	if err != nil {
		t.Fatal(err)
	}
	plan.closeListeners() // as after the process that picked them exited
	n := len(plan.Proxies)
	plan.Proxies = slices.DeleteFunc(plan.Proxies, func(x DevProxyPlan) bool { return strings.Contains(x.From, "/") })
	path := filepath.Join(cfg.DataDir, DevPlanFile)
	if err := writePlan(path, plan); err != nil {
		t.Fatal(err)
	}
	got, err := loadDevPlan(cfg, path, nil)
	if got != nil {
		got.closeListeners()
	}
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Proxies) != n || !hasProcessProxies(got) {
		t.Fatalf("%d proxies after reload, want %d", len(got.Proxies), n)
	}
}

func devLinkTestDev(t *testing.T) *Dev {
	t.Helper()
	cfg := devTestConfig(t.TempDir())
	plan, err := newDevPlan(cfg)
	if err != nil {
		t.Fatal(err)
	}
	plan.closeListeners() // as after the process that picked them exited
	d := &Dev{cfg: cfg, plan: plan, log: slog.New(slog.DiscardHandler), net: chaos.NewNetwork(nil)}
	t.Cleanup(d.net.Close)
	for _, x := range plan.Proxies {
		if _, err := d.net.Proxy(x.From, x.To, "127.0.0.1:0", x.Target); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.writeConfigs(); err != nil {
		t.Fatal(err)
	}
	return d
}

func linkOf(st DevStatus, from, to string) (DevLinkStatus, bool) {
	for _, l := range st.Links {
		if l.From == from && l.To == to {
			return l, true
		}
	}
	return DevLinkStatus{}, false
}

// TestDevLinkOps: cut, shape, partition and heal-all on region and
// process endpoints; bad requests name the field and change nothing.
func TestDevLinkOps(t *testing.T) {
	d := devLinkTestDev(t)
	// Status lists every region link, and process links only when not
	// in their default state.
	st := d.Status()
	if len(st.Links) != 3*2 {
		t.Fatalf("%d links in a fresh status: %+v", len(st.Links), st.Links)
	}
	must := func(req DevLinkRequest) {
		t.Helper()
		if err := d.Link(req); err != nil {
			t.Fatalf("%+v: %v", req, err)
		}
	}
	must(DevLinkRequest{Op: "cut", A: "a/broker-0", B: "a/bookie-1", Oneway: true})
	if !d.net.IsCut("a/broker-0", "a/bookie-1") || d.net.IsCut("a/bookie-1", "a/broker-0") {
		t.Fatal("oneway process cut")
	}
	must(DevLinkRequest{Op: "shape", A: "a", B: "b", Bandwidth: "1MB", Drop: 0.05, SlowClose: "2s"})
	st = d.Status()
	if l, ok := linkOf(st, "a/broker-0", "a/bookie-1"); !ok || !l.Cut {
		t.Fatalf("cut process link not in status: %+v", st.Links)
	}
	if l, _ := linkOf(st, "b", "a"); l.Bandwidth != 1e6 || l.Drop != 0.05 || l.SlowClose != "2s" {
		t.Fatalf("shaped b→a: %+v", l)
	}
	must(DevLinkRequest{Op: "latency", A: "a/bookie-0", B: "a/meta-0", Latency: "20ms"})
	if lat, _ := d.net.Latency("a/meta-0", "a/bookie-0"); lat.Milliseconds() != 20 {
		t.Fatalf("process latency %v", lat)
	}

	// Partition of regions: {a} against the rest.
	must(DevLinkRequest{Op: "partition", Groups: [][]string{{"a"}}})
	for _, p := range [][2]string{{"a", "b"}, {"c", "a"}} {
		if !d.net.IsCut(p[0], p[1]) {
			t.Fatalf("%s→%s not cut by the partition", p[0], p[1])
		}
	}
	if d.net.IsCut("b", "c") {
		t.Fatal("b→c cut by a partition isolating a")
	}
	// Partition of processes: isolate broker-1 of b from its region.
	must(DevLinkRequest{Op: "partition", Groups: [][]string{{"b/broker-1"}}})
	for _, p := range [][2]string{{"b/broker-1", "b/meta-0"}, {"b/bookie-2", "b/broker-1"}, {"b/broker-0", "b/broker-1"}} {
		if !d.net.IsCut(p[0], p[1]) {
			t.Fatalf("%s→%s not cut", p[0], p[1])
		}
	}
	if d.net.IsCut("b/broker-0", "b/bookie-0") {
		t.Fatal("b/broker-0→b/bookie-0 cut")
	}
	must(DevLinkRequest{Op: "heal-all"})
	for _, l := range d.net.Links() {
		if l.Cut || !l.Shape.IsZero() {
			t.Fatalf("after heal-all: %+v", l)
		}
	}
	if lat, _ := d.net.Latency("a/meta-0", "a/bookie-0"); lat.Milliseconds() != 20 {
		t.Fatal("heal-all reset a latency")
	}

	for _, bad := range []struct {
		req  DevLinkRequest
		want string
	}{
		{DevLinkRequest{Op: "cut", A: "x", B: "b"}, `a: region "x"`},
		{DevLinkRequest{Op: "cut", A: "a", B: "a/broker-0"}, `b: "a/broker-0" and a "a"`},
		{DevLinkRequest{Op: "cut", A: "a/broker-0", B: "b/broker-0"}, `b: "b/broker-0" is not in region a`},
		{DevLinkRequest{Op: "cut", A: "a/broker-7", B: "a/meta-0"}, `a: "a/broker-7": index: 7 is out of range`},
		{DevLinkRequest{Op: "cut", A: "a/disk-0", B: "a/meta-0"}, `a: "a/disk-0": role: "disk"`},
		{DevLinkRequest{Op: "cut", A: "a/broker", B: "a/meta-0"}, `a: "a/broker": want <region>/<role>-<index>`},
		{DevLinkRequest{Op: "cut", A: "b", B: "b"}, `b: "b" is a itself`},
		{DevLinkRequest{Op: "shape", A: "a", B: "b", Bandwidth: "fast"}, `bandwidth: "fast"`},
		{DevLinkRequest{Op: "shape", A: "a", B: "b", Bandwidth: "-1MB"}, `bandwidth: "-1MB"`},
		{DevLinkRequest{Op: "shape", A: "a", B: "b", Drop: 1.5}, "drop: 1.5 must be in [0, 1]"},
		{DevLinkRequest{Op: "shape", A: "a", B: "b", SlowClose: "2h"}, "slow_close: 2h0m0s must be in"},
		{DevLinkRequest{Op: "partition"}, "groups: empty"},
		{DevLinkRequest{Op: "partition", Groups: [][]string{{"a"}, {}}}, "groups[1]: empty"},
		{DevLinkRequest{Op: "partition", Groups: [][]string{{"a"}, {"b", "q"}}}, `groups[1][1]: region "q"`},
		{DevLinkRequest{Op: "partition", Groups: [][]string{{"a"}, {"b", "a"}}}, `groups[1][1]: "a" is in two groups`},
		{DevLinkRequest{Op: "partition", Groups: [][]string{{"a"}, {"b/broker-0"}}}, `groups[1][0]: "b/broker-0": a partition's members are all regions`},
		{DevLinkRequest{Op: "partition", Groups: [][]string{{"a/broker-0"}, {"b/broker-0"}}}, `groups[1][0]`},
		{DevLinkRequest{Op: "partition", Groups: [][]string{{"a", "b", "c"}}}, "partitions nothing"},
		{DevLinkRequest{Op: "flood", A: "a", B: "b"}, `op: "flood"`},
	} {
		if err := d.Link(bad.req); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Fatalf("%+v: %v, want an error mentioning %q", bad.req, err, bad.want)
		}
	}
	for _, l := range d.net.Links() {
		if l.Cut || !l.Shape.IsZero() {
			t.Fatalf("a refused request changed %+v", l)
		}
	}
}

func TestParseBandwidth(t *testing.T) {
	for in, want := range map[string]int64{"0": 0, "1MB": 1e6, "512KiB": 512 << 10, "2.5KB": 2500, "100": 100, "3 MiB": 3 << 20, "1GB": 1e9, "10B": 10} {
		if got, err := ParseBandwidth(in); err != nil || got != want {
			t.Fatalf("ParseBandwidth(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "MB", "1TB", "-1", "2000GB"} {
		if _, err := ParseBandwidth(bad); err == nil {
			t.Fatalf("ParseBandwidth(%q) accepted", bad)
		}
	}
}
