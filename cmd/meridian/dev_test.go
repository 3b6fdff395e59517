//go:build unix

package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/meridianmq/meridian/region"
	"github.com/meridianmq/meridian/security"
)

// Process-level tests of `meridian dev`: the cluster runs as separate
// processes of the test binary, and the test drives it only through the
// CLI, cluster.json and the link proxies' addresses.

// devCluster is a running `meridian dev` process.
type devCluster struct {
	dir  string
	p    *proc
	info region.DevClusterInfo
	// tr reaches the processes' HTTP endpoints: TLS with the cluster's
	// CA and its admin token when secured.
	tr http.RoundTripper
}

// startDev runs `meridian dev` with args on dir and waits for cluster.json.
func startDev(t *testing.T, dir string, args ...string) *devCluster {
	t.Helper()
	// The tools find the cluster file (and the credentials in it) through
	// the registry of running clusters (region.DevRegistryDir, under the
	// user's cache directory: one of the test's own here).
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	p := startProc(t, "dev", append([]string{"dev", "--data-dir", dir}, args...)...)
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		logs, _ := filepath.Glob(filepath.Join(dir, "*", "*.log"))
		for _, l := range logs {
			b, _ := os.ReadFile(l)
			t.Logf("--- %s:\n%s", l, tail(string(b), 3000))
		}
	})
	d := &devCluster{dir: dir, p: p}
	waitFor(t, "cluster.json", 3*time.Minute, func() (bool, string) {
		select {
		case <-p.done:
			t.Fatalf("meridian dev exited:\n%s", tail(p.log.String(), 6000))
		default:
		}
		info, err := region.ReadDevCluster(dir)
		if err != nil {
			return false, err.Error()
		}
		d.info = info
		return true, ""
	})
	tlsFiles, tok := d.info.Credentials()
	var src security.TokenSource
	if tok != "" {
		src = security.TokenFromFile(tok)
	}
	rt, err := security.ClientRuntime(tlsFiles, src, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Close() })
	d.tr = rt.HTTPClient(0).Transport
	return d
}

// url is the URL of path on a process's (or proxy's) HTTP address.
func (d *devCluster) url(addr, path string) string {
	if d.info.CA != "" {
		return "https://" + addr + path
	}
	return "http://" + addr + path
}

// probe is probe with the cluster's credentials.
func (d *devCluster) probe(url string, timeout time.Duration) (time.Duration, error) {
	return probeWith(&http.Client{Transport: d.tr, Timeout: timeout}, url)
}

// get returns the body of a GET of url ("" on error).
func (d *devCluster) get(url string) string {
	resp, err := (&http.Client{Transport: d.tr, Timeout: 30 * time.Second}).Get(url)
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// cli runs a meridian subcommand and fails the test unless it succeeds.
func (d *devCluster) cli(t *testing.T, args ...string) string {
	t.Helper()
	r := runCLI(t, "", args...)
	if r.code != 0 {
		t.Fatalf("meridian %v: exit %d: %s", args, r.code, r.stderr)
	}
	return r.stdout
}

// dev runs `meridian dev ARGS --data-dir DIR`.
func (d *devCluster) dev(t *testing.T, args ...string) string {
	t.Helper()
	return d.cli(t, append(append([]string{"dev"}, args...), "--data-dir", d.dir)...)
}

func (d *devCluster) status(t *testing.T) region.DevStatus {
	t.Helper()
	var st region.DevStatus
	if err := json.Unmarshal([]byte(d.dev(t, "status", "--output", "json")), &st); err != nil {
		t.Fatal(err)
	}
	return st
}

func (d *devCluster) grpc(t *testing.T, name string) string {
	t.Helper()
	for _, r := range d.info.Regions {
		if r.Name == name {
			return r.GRPC
		}
	}
	t.Fatalf("region %s not in cluster.json %+v", name, d.info)
	return ""
}

// produce sends n messages to topic in a region and returns the
// acknowledged IDs.
func (d *devCluster) produce(t *testing.T, regionName, topic string, n int) []string {
	t.Helper()
	var ids []string
	for _, l := range jsonLines(t, d.cli(t, "produce", "--url", d.grpc(t, regionName), "--topic", topic, "--count", fmt.Sprint(n), "--size", "32", "--output", "json")) {
		if l["origin_region"] != regionName || l["origin_id"] != l["id"] {
			t.Fatalf("produce in %s: origin %v/%v for local message %v", regionName, l["origin_region"], l["origin_id"], l["id"])
		}
		ids = append(ids, regionName+"/"+l["id"].(string))
	}
	if len(ids) != n {
		t.Fatalf("produce in %s: %d acknowledged, want %d", regionName, len(ids), n)
	}
	return ids
}

// consumeAll consumes want messages with a new subscription from the
// earliest and fails if an acknowledged message is missing. Messages are
// named "origin region/origin ID" (as produce returns them), so the same
// names hold in every region a message is replicated to.
func (d *devCluster) consumeAll(t *testing.T, regionName, topic, sub string, want []string) {
	t.Helper()
	out := d.cli(t, "consume", "--url", d.grpc(t, regionName), "--topic", topic, "--subscription", sub, "--from", "earliest", "--count", fmt.Sprint(len(want)), "--output", "json")
	seen, dups := map[string]bool{}, 0
	for _, l := range jsonLines(t, out) {
		id := fmt.Sprint(l["origin_region"], "/", l["origin_id"])
		if seen[id] {
			dups++
		}
		seen[id] = true
	}
	var lost []string
	for _, id := range want {
		if !seen[id] {
			lost = append(lost, id)
		}
	}
	t.Logf("consume %s in %s: %d messages, %d duplicates", sub, regionName, len(seen), dups)
	if len(lost) > 0 {
		t.Fatalf("consume %s in %s: %d acknowledged messages lost: %v", sub, regionName, len(lost), lost)
	}
}

// proxy finds the link proxy of kind from region from to region to.
func devProxy(t *testing.T, st region.DevStatus, from, to, kind string) region.DevProxyPlan {
	t.Helper()
	for _, x := range st.Proxies {
		if x.From == from && x.To == to && x.Kind == kind {
			return x
		}
	}
	t.Fatalf("no %s proxy %s→%s in %+v", kind, from, to, st.Proxies)
	return region.DevProxyPlan{}
}

// grepLines returns the lines of s that contain sub.
func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// probe GETs url with a timeout and reports how long it took and whether
// it answered 200.
func probe(url string, timeout time.Duration) (time.Duration, error) {
	return probeWith(&http.Client{Timeout: timeout}, url)
}

// probeWith is probe with client c.
func probeWith(c *http.Client, url string) (time.Duration, error) {
	start := time.Now()
	resp, err := c.Get(url)
	if err != nil {
		return time.Since(start), err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return time.Since(start), errors.New(resp.Status)
	}
	return time.Since(start), nil
}

// interrupt sends SIGINT (Ctrl-C) to meridian dev and waits for it to
// exit; every process it started must be gone and cluster.json removed.
func (d *devCluster) interrupt(t *testing.T, pids []int) {
	t.Helper()
	if err := d.p.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	select {
	case <-d.p.done:
	case <-time.After(2 * time.Minute):
		t.Fatalf("meridian dev still running 2m after SIGINT:\n%s", tail(d.p.log.String(), 4000))
	}
	if code := d.p.cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("meridian dev exit %d after SIGINT:\n%s", code, tail(d.p.log.String(), 4000))
	}
	for _, pid := range pids {
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Fatalf("pid %d still exists after meridian dev stopped (err %v)", pid, err)
		}
	}
	if _, err := os.Stat(filepath.Join(d.dir, region.DevClusterFile)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("cluster.json left behind: %v", err)
	}
}

func runningPIDs(t *testing.T, st region.DevStatus, want int) []int {
	t.Helper()
	var pids []int
	for _, p := range st.Processes {
		if p.State != "running" || p.PID == 0 {
			t.Fatalf("process %s: %+v", p.Name, p)
		}
		pids = append(pids, p.PID)
	}
	if len(pids) != want {
		t.Fatalf("%d processes, want %d: %+v", len(pids), want, st.Processes)
	}
	return pids
}

// TestDevCluster runs `meridian dev --regions a,b --bookies 1 --brokers 1`:
// produce and consume in each region; `dev link latency|cut|heal` change
// what a link proxy does; `dev kill broker a 0` and `dev start broker a 0`
// restart a broker with its data; bad input is refused naming the field;
// Ctrl-C leaves no process behind; a restart on the same directory keeps
// the ports and the data.
func TestDevCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and starts seven processes (-short)")
	}
	dir := t.TempDir()
	cliBinary(t)
	d := startDev(t, dir, "--regions", "a,b", "--bookies", "1", "--brokers", "1", "--wan-latency", "20ms")
	if len(d.info.Regions) != 2 || d.info.Regions[0].Name != "a" || d.info.Regions[1].Name != "b" || d.info.Control == "" {
		t.Fatalf("cluster.json: %+v", d.info)
	}

	// Every region serves public/default.
	const topic = "public/default/dev"
	acked := map[string][]string{}
	for _, r := range []string{"a", "b"} {
		acked[r] = d.produce(t, r, topic, 20)
		d.consumeAll(t, r, topic, "s1", acked[r])
	}

	// Replication is off until set; a policy set in one region is seen in
	// the other: the global shard spans the regions (Raft through the
	// proxies).
	policies := func(regionName string) map[string]any {
		t.Helper()
		l := jsonLines(t, d.cli(t, "admin", "--url", d.grpc(t, regionName), "--output", "json", "namespaces", "policies", "public/default"))
		if len(l) != 1 {
			t.Fatalf("namespaces policies in %s: %v", regionName, l)
		}
		return l[0]
	}
	if rr := policies("b")["replicationRegions"]; rr != nil && len(rr.([]any)) != 0 {
		t.Fatalf("public/default replicates before anyone set it: %v", rr)
	}
	// --wait returns once each region backfilled the other: the messages
	// produced before replication was on are in both regions, under their
	// origin IDs, once each.
	d.cli(t, "admin", "--url", d.grpc(t, "a"), "namespaces", "set-replication", "public/default", "--regions", "a,b", "--wait", "--wait-timeout", "60s")
	waitFor(t, "b sees a's replication policy", 30*time.Second, func() (bool, string) {
		p := policies("b")
		return fmt.Sprint(p["replicationRegions"]) == "[a b]", fmt.Sprint(p)
	})
	all := func() []string { return append(append([]string(nil), acked["a"]...), acked["b"]...) }
	for _, r := range []string{"a", "b"} {
		d.consumeAll(t, r, topic, "replicated", all())
	}

	st := d.status(t)
	pids := runningPIDs(t, st, 6) // meta, bookie, broker per region
	// The WAN membership pool gossips through the proxies too.
	waitWAN := func(to string, reachable bool) {
		t.Helper()
		want := fmt.Sprintf("meridian_broker_wan_region_reachable{region=%q} %d", to, map[bool]int{true: 1}[reachable])
		waitFor(t, "a's broker: "+want, 60*time.Second, func() (bool, string) {
			m := d.get(d.url(d.info.Regions[0].HTTP, "/metrics"))
			return strings.Contains(m, want), grepLines(m, "wan_region_reachable")
		})
	}
	waitWAN("b", true)
	for _, l := range st.Links {
		if l.Latency != "20ms" || l.Cut {
			t.Fatalf("link %+v: want 20ms, not cut", l)
		}
	}
	for _, kind := range []string{"raft", "grpc", "http"} {
		devProxy(t, st, "a", "b", kind)
		devProxy(t, st, "b", "a", kind)
	}

	// A request through a→b's proxy to b's broker crosses the link twice.
	px := devProxy(t, st, "a", "b", "http")
	url := d.url(px.Listen, "/readyz")
	took, err := d.probe(url, 30*time.Second)
	if err != nil || took < 40*time.Millisecond {
		t.Fatalf("through the proxy at 20ms: %v after %v (want 200 after >= 40ms)", err, took)
	}
	d.dev(t, "link", "latency", "a", "b", "150ms", "--jitter", "5ms")
	took, err = d.probe(url, 30*time.Second)
	if err != nil || took < 290*time.Millisecond {
		t.Fatalf("through the proxy at 150ms±5ms: %v after %v (want 200 after >= 290ms)", err, took)
	}
	d.dev(t, "link", "latency", "a", "b", "20ms")
	// gRPC too: an admin call to b's broker through a→b's proxy.
	grpcProxy := devProxy(t, st, "a", "b", "grpc").Listen
	if out := d.cli(t, "admin", "--url", grpcProxy, "tenants", "list"); !strings.Contains(out, "public") {
		t.Fatalf("tenants list through the proxy: %q", out)
	}
	d.dev(t, "link", "cut", "a", "b")
	if _, err := d.probe(url, 2*time.Second); err == nil {
		t.Fatal("a request through a cut link was answered")
	}
	if r := runCLI(t, "", "admin", "--url", grpcProxy, "--connect-timeout", "2s", "tenants", "list"); r.code == 0 {
		t.Fatalf("tenants list through a cut link answered: %q", r.stdout)
	}
	st = d.status(t)
	for _, l := range st.Links {
		if !l.Cut {
			t.Fatalf("after cut a b: %+v", st.Links)
		}
	}
	// a's WAN pool sees b unreachable while the link is cut.
	waitWAN("b", false)
	d.dev(t, "link", "heal", "a", "b")
	waitFor(t, "request through the healed link", 30*time.Second, func() (bool, string) {
		_, err := d.probe(url, 5*time.Second)
		return err == nil, fmt.Sprint(err)
	})
	waitWAN("b", true)
	if out := d.cli(t, "admin", "--url", grpcProxy, "tenants", "list"); !strings.Contains(out, "public") {
		t.Fatalf("tenants list through the healed link: %q", out)
	}
	// One way: b→a cut stalls the answers of a's request.
	d.dev(t, "link", "cut", "b", "a", "--oneway")
	st = d.status(t)
	for _, l := range st.Links {
		if l.Cut != (l.From == "b") {
			t.Fatalf("after cut b a --oneway: %+v", st.Links)
		}
	}
	if _, err := d.probe(url, 2*time.Second); err == nil {
		t.Fatal("a request whose answer crosses a cut link was answered")
	}
	d.dev(t, "link", "heal", "a", "b")
	waitFor(t, "request after the one-way heal", 30*time.Second, func() (bool, string) {
		_, err := d.probe(url, 5*time.Second)
		return err == nil, fmt.Sprint(err)
	})

	// Bad input names the field and changes nothing.
	for _, bad := range []struct {
		args []string
		want string
	}{
		{[]string{"link", "cut", "a", "x"}, `region "x" is not one of a,b`},
		{[]string{"link", "cut", "a", "a"}, "b:"},
		{[]string{"link", "latency", "a", "b", "fast"}, "latency"},
		{[]string{"link", "latency", "a", "b", "2m"}, "latency: 2m0s must be in"},
		{[]string{"kill", "brokr", "a", "0"}, "role"},
		{[]string{"kill", "broker", "a", "3"}, "index"},
		{[]string{"kill", "broker", "a", "x"}, "INDEX"},
		{[]string{"kill", "broker", "a", "0", "--signal", "HUP"}, "signal"},
		{[]string{"start", "broker", "a", "0"}, "is running"},
	} {
		r := runCLI(t, "", append(append([]string{"dev"}, bad.args...), "--data-dir", dir)...)
		if r.code == 0 || !strings.Contains(r.stderr, bad.want) {
			t.Fatalf("dev %v: exit %d, stderr %q, want an error mentioning %q", bad.args, r.code, r.stderr, bad.want)
		}
	}
	if st := d.status(t); !slices.Equal(runningPIDs(t, st, 6), pids) {
		t.Fatalf("bad input changed processes: %+v", st.Processes)
	}
	if r := runCLI(t, "", "dev", "status", "--data-dir", t.TempDir()); r.code == 0 || !strings.Contains(r.stderr, "no running cluster") {
		t.Fatalf("dev status on an empty dir: exit %d, %q", r.code, r.stderr)
	}

	// Kill a's broker (SIGKILL) while a produces and replicates, then
	// start it again: same config, same data; b still gets every message
	// a acknowledged, once.
	more := d.produce(t, "a", topic, 30)
	acked["a"] = append(acked["a"], more...)
	d.dev(t, "kill", "broker", "a", "0")
	st = d.status(t)
	for _, p := range st.Processes {
		if p.Name == "a/broker-0" && (p.State != "exited" || !strings.Contains(p.Exit, "killed")) {
			t.Fatalf("after kill: %+v", p)
		}
	}
	d.dev(t, "start", "broker", "a", "0")
	st = d.status(t)
	pids = runningPIDs(t, st, 6)
	d.consumeAll(t, "a", topic, "s2", all())
	more = d.produce(t, "a", topic, 5)
	acked["a"] = append(acked["a"], more...)
	d.consumeAll(t, "b", topic, "after-kill", all())

	// Taking b out of the list stops replication; --yes also deletes the
	// replicator cursors (never b's data).
	out := d.cli(t, "admin", "--url", d.grpc(t, "a"), "namespaces", "set-replication", "public/default", "--regions", "a", "--yes")
	if !strings.Contains(out, "region a: deleted the cursors meridian.repl.b") {
		t.Fatalf("set-replication --yes: %q", out)
	}

	// Pause and resume b's bookie.
	d.dev(t, "kill", "bookie", "b", "0", "--signal", "STOP")
	if st := d.status(t); !slices.ContainsFunc(st.Processes, func(p region.DevProcessStatus) bool {
		return p.Name == "b/bookie-0" && p.State == "paused"
	}) {
		t.Fatalf("after STOP: %+v", st.Processes)
	}
	d.dev(t, "kill", "bookie", "b", "0", "--signal", "CONT")

	// Ctrl-C stops everything; a restart keeps ports and data.
	before := d.info
	d.interrupt(t, pids)
	d = startDev(t, dir, "--regions", "a,b", "--bookies", "1", "--brokers", "1")
	if fmt.Sprint(d.info.Regions) != fmt.Sprint(before.Regions) {
		t.Fatalf("restart moved the brokers: before %+v, after %+v", before.Regions, d.info.Regions)
	}
	for _, r := range []string{"a", "b"} {
		d.consumeAll(t, r, topic, "after-restart", all())
	}
	st = d.status(t)
	for _, l := range st.Links {
		if l.Latency != "0s" {
			t.Fatalf("restart without --wan-latency: link %+v", l)
		}
	}
	d.interrupt(t, runningPIDs(t, st, 6))
}

// TestDevClusterThreeRegions is the full-size variant (MERIDIAN_LONG=1,
// `make test-long`): three regions of one metadata node, three bookies on
// two racks and two brokers, with 40ms±5ms between regions. Each region
// serves produce and consume; a cut between a and b leaves c reachable
// from both; with a cut off from both, b and c keep the global majority
// and a policy set there reaches a after the heal; killing and restarting
// a region's metadata node and a bookie keeps the region serving.
func TestDevClusterThreeRegions(t *testing.T) {
	if os.Getenv("MERIDIAN_LONG") == "" {
		t.Skip("MERIDIAN_LONG not set (make test-long)")
	}
	dir := t.TempDir()
	cliBinary(t)
	d := startDev(t, dir, "--regions", "a,b,c", "--wan-latency", "40ms", "--jitter", "5ms")
	st := d.status(t)
	pids := runningPIDs(t, st, 3*(1+3+2))
	// Bookies are spread over two racks in every region.
	var plan region.DevPlan
	b, err := os.ReadFile(filepath.Join(dir, region.DevPlanFile))
	if err != nil || json.Unmarshal(b, &plan) != nil {
		t.Fatalf("dev.json: %v", err)
	}
	for _, r := range plan.Regions {
		racks := map[string]bool{}
		for _, b := range r.Bookies {
			racks[b.Rack] = true
		}
		if len(r.Bookies) != 3 || len(racks) != 2 {
			t.Fatalf("region %s bookies %+v: want 3 on 2 racks", r.Name, r.Bookies)
		}
	}
	const topic = "public/default/dev3"
	acked := map[string][]string{}
	for _, r := range []string{"a", "b", "c"} {
		acked[r] = d.produce(t, r, topic, 50)
		d.consumeAll(t, r, topic, "s1", acked[r])
	}
	d.dev(t, "link", "cut", "a", "b")
	for _, pair := range [][2]string{{"a", "c"}, {"b", "c"}} {
		px := devProxy(t, st, pair[0], pair[1], "http")
		if _, err := d.probe(d.url(px.Listen, "/readyz"), 30*time.Second); err != nil {
			t.Fatalf("%s→%s while a↔b is cut: %v", pair[0], pair[1], err)
		}
	}
	px := devProxy(t, st, "a", "b", "http")
	if _, err := d.probe(d.url(px.Listen, "/readyz"), 2*time.Second); err == nil {
		t.Fatal("a→b answered while cut")
	}
	d.dev(t, "link", "heal", "a", "b")
	// a cut from both others: b and c keep the global majority and change
	// policies; a sees the change after the heal.
	d.dev(t, "link", "cut", "a", "b")
	d.dev(t, "link", "cut", "a", "c")
	d.cli(t, "admin", "--url", d.grpc(t, "b"), "namespaces", "set-policies", "public/default", "--replication-regions", "b,c")
	d.dev(t, "link", "heal", "a", "b")
	d.dev(t, "link", "heal", "a", "c")
	waitFor(t, "a sees the policy set while it was cut off", 60*time.Second, func() (bool, string) {
		out := runCLI(t, "", "admin", "--url", d.grpc(t, "a"), "--output", "json", "namespaces", "policies", "public/default")
		return strings.Contains(out.stdout, `"replicationRegions":["b","c"]`), out.stdout + out.stderr
	})
	for _, role := range []string{"meta", "bookie"} {
		d.dev(t, "kill", role, "c", "0")
		d.dev(t, "start", role, "c", "0")
	}
	more := d.produce(t, "c", topic, 20)
	// c now also holds what b (and a) replicate to it: every message c
	// acknowledged must be there, among others.
	d.consumeSuperset(t, "c", topic, "s2", append(acked["c"], more...))
	st = d.status(t)
	d.interrupt(t, runningPIDs(t, st, len(pids)))
}
