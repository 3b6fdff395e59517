package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/meridianmq/meridian/bookie/ledger"
	"github.com/meridianmq/meridian/metadata"
	"github.com/meridianmq/meridian/topology"
	"gopkg.in/yaml.v3"
)

// Deploy tests: the sample configs in deploy/config load, validate and fit
// together, and a region made of separate `meridian meta`, `meridian bookie`
// and `meridian broker` processes (configs derived from the samples) serves
// produce, consume, admin and autorecovery.

const sampleDir = "../../deploy/config"

func readSample(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(sampleDir, name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestDeploySamplesLoad loads every sample as its command would and checks
// that meta.yaml, bookie.yaml and broker.yaml work together on one machine.
func TestDeploySamplesLoad(t *testing.T) {
	metas, err := filepath.Glob(filepath.Join(sampleDir, "meta*.yaml"))
	if err != nil || len(metas) < 4 {
		t.Fatalf("meta samples: %v %v", metas, err)
	}
	for _, p := range metas {
		cfg, err := metadata.LoadNodeConfig(p)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if err := cfg.Validate(); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
	}
	meta, err := metadata.LoadNodeConfig(filepath.Join(sampleDir, "meta.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	bcfg, bfc, plan, err := loadBookieConfig(readSample(t, "bookie.yaml"))
	if err != nil {
		t.Fatalf("bookie.yaml: %v", err)
	}
	if !plan.enabled || plan.auditor.LostBookieDelay != 30*time.Second || plan.auditor.ID != bcfg.ID {
		t.Fatalf("bookie.yaml autorecovery: %+v", plan)
	}
	br, err := loadBrokerConfig(readSample(t, "broker.yaml"))
	if err != nil {
		t.Fatalf("broker.yaml: %v", err)
	}
	// The bookie and the broker reach the sample metadata node and find
	// their region's shard on it.
	if !slices.Equal(bfc.Metadata.Endpoints, []string{meta.GRPCAddress}) {
		t.Fatalf("bookie.yaml metadata.endpoints %v, meta.yaml grpc_address %s", bfc.Metadata.Endpoints, meta.GRPCAddress)
	}
	if !slices.Equal(br.Metadata.Endpoints, []string{meta.GRPCAddress}) {
		t.Fatalf("broker.yaml metadata.endpoints %v, meta.yaml grpc_address %s", br.Metadata.Endpoints, meta.GRPCAddress)
	}
	var shards []string
	for _, s := range meta.Shards {
		shards = append(shards, s.Name)
	}
	if !slices.Contains(shards, metadata.GlobalShard) || !slices.Contains(shards, bcfg.Region) || !slices.Contains(shards, br.Metadata.RegionalShard) || bcfg.Region != br.Broker.Region {
		t.Fatalf("meta.yaml shards %v; bookie region %q; broker region %q shard %q", shards, bcfg.Region, br.Broker.Region, br.Metadata.RegionalShard)
	}
	// One bookie: the broker's default quorums must fit it.
	if br.Broker.DefaultEnsembleSize != 1 {
		t.Fatalf("broker.yaml default_ensemble_size %d with one sample bookie", br.Broker.DefaultEnsembleSize)
	}
	// No two processes of the samples listen on the same address.
	addrs := map[string]string{}
	for who, a := range map[string]string{
		"meta raft": meta.RaftAddress, "meta grpc": meta.GRPCAddress, "meta http": meta.HTTPAddress,
		"bookie grpc": bcfg.ListenAddr, "bookie http": bcfg.HTTPAddr, "bookie gossip": bfc.Gossip.BindAddr,
		"broker grpc": br.Broker.GRPCAddress, "broker http": br.Broker.HTTPAddress,
	} {
		if a == "" {
			continue
		}
		if other, dup := addrs[a]; dup {
			t.Fatalf("%s and %s both use %s", who, other, a)
		}
		addrs[a] = who
	}

	// Bad autorecovery settings are refused with the field's name.
	for _, bad := range []struct{ yaml, want string }{
		{"id: b\njournal_dir: /tmp/x\nautorecovery:\n  enabled: true\n", "autorecovery.enabled"},
		{"id: b\njournal_dir: /tmp/x\nmetadata:\n  endpoints: [a:1]\nautorecovery:\n  lost_bookie_delay: -1s\n", "autorecovery.lost_bookie_delay"},
		{"id: b\njournal_dir: /tmp/x\nmetadata:\n  endpoints: [a:1]\nautorecovery:\n  copy_concurrency: 0\n", "autorecovery.copy_concurrency"},
		{"id: b\njournal_dir: /tmp/x\nmetadata:\n  endpoints: [a:1]\nautorecovery:\n  no_such: 1\n", "no_such"},
	} {
		if _, _, _, err := loadBookieConfig([]byte(bad.yaml)); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Fatalf("config %q: error %v, want mention of %q", bad.yaml, err, bad.want)
		}
	}
	// Without metadata autorecovery is off (nothing to audit).
	_, _, plan, err = loadBookieConfig([]byte("id: b\njournal_dir: /tmp/x\n"))
	if err != nil || plan.enabled {
		t.Fatalf("no metadata: plan %+v, err %v", plan, err)
	}
}

// yamlMap edits a parsed sample.
type yamlMap map[string]any

func (m yamlMap) sub(key string) yamlMap {
	v, ok := m[key].(map[string]any)
	if !ok {
		v = map[string]any{}
		m[key] = v
	}
	return v
}

// deriveSample parses a sample, applies edit and writes the result to dir.
func deriveSample(t *testing.T, sample, dir, name string, edit func(m yamlMap)) string {
	t.Helper()
	var raw map[string]any // nested maps decode as map[string]any
	if err := yaml.Unmarshal(readSample(t, sample), &raw); err != nil {
		t.Fatalf("%s: %v", sample, err)
	}
	m := yamlMap(raw)
	edit(m)
	b, err := yaml.Marshal(map[string]any(m))
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// syncBuffer is a bytes.Buffer safe for a writing child process and a
// reading test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// proc is a server child process.
type proc struct {
	name string
	cmd  *exec.Cmd
	log  *syncBuffer
	done chan struct{}
}

// startProc starts the meridian binary; t.Cleanup stops it with SIGTERM
// (SIGKILL after 20 s) and logs its output if the test failed.
func startProc(t *testing.T, name string, args ...string) *proc {
	t.Helper()
	p := &proc{name: name, cmd: exec.Command(cliBinary(t), args...), log: &syncBuffer{}, done: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		p.stop()
		if t.Failed() {
			t.Logf("--- %s output:\n%s", p.name, tail(p.log.String(), 4000))
		}
	})
	return p
}

func (p *proc) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(20 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

func (p *proc) kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

// waitHTTP polls url until it answers 200 or the process exits.
func waitHTTP(t *testing.T, p *proc, url string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if resp, err := http.Get(url); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		select {
		case <-p.done:
			t.Fatalf("%s exited before %s answered 200:\n%s", p.name, url, tail(p.log.String(), 4000))
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %s not 200 within %v", p.name, url, timeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitFor polls cond until it holds.
func waitFor(t *testing.T, what string, timeout time.Duration, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, state := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v; last state: %s", what, timeout, state)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func httpGet(url string) string {
	resp, err := http.Get(url)
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

type smokeBookie struct {
	id, grpc, http string
	p              *proc
}

// TestDeploySmoke runs a region as separate processes from configs derived
// from the samples: one metadata node, five bookies (E=3, Qw=2, Qa=2), one
// broker. It produces and consumes through the broker with the CLI, lists
// the bookies, pauses and resumes autorecovery, then decommissions a bookie
// of a closed ledger, waits for autorecovery to move its replicas, kills it
// and a second bookie of that ledger: every acknowledged message is still
// consumed.
func TestDeploySmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and starts seven processes (-short)")
	}
	dir := t.TempDir()
	cliBinary(t)

	// Metadata node.
	metaGRPC := startMetaProc(t, dir)

	// Bookies on two racks, gossiping through the first.
	var bookies []*smokeBookie
	var seed string
	for i := range 5 {
		b := &smokeBookie{id: fmt.Sprintf("bookie-%d", i+1), grpc: cliFreeAddr(t), http: cliFreeAddr(t)}
		gossip := cliFreeAddr(t)
		if seed == "" {
			seed = gossip
		}
		cfg := bookieProcConfig(t, dir, b.id, b.grpc, b.http, fmt.Sprintf("rack-%d", i%2), metaGRPC, func(m yamlMap) {
			m["session_ttl"] = "3s"
			setGossip(m, gossip, seed)
			ar := m.sub("autorecovery")
			ar["check_interval"], ar["poll_interval"], ar["retry_backoff"] = "200ms", "200ms", "1s"
		})
		b.p = startProc(t, b.id, "bookie", "--config", cfg)
		bookies = append(bookies, b)
	}
	for _, b := range bookies {
		waitHTTP(t, b.p, "http://"+b.http+"/readyz", 90*time.Second)
	}

	// Broker.
	brGRPC, brHTTP := cliFreeAddr(t), cliFreeAddr(t)
	brCfg := deriveSample(t, "broker.yaml", dir, "broker.yaml", func(m yamlMap) {
		b := m.sub("broker")
		b["grpc_address"], b["http_address"] = brGRPC, brHTTP
		b["default_ensemble_size"], b["default_write_quorum"], b["default_ack_quorum"] = 3, 2, 2
		m.sub("metadata")["endpoints"] = []string{metaGRPC}
	})
	broker := startProc(t, "broker", "broker", "--config", brCfg)
	waitHTTP(t, broker, "http://"+brHTTP+"/readyz", 90*time.Second)

	admin := func(args ...string) cliResult {
		t.Helper()
		r := runCLI(t, "", append([]string{"admin", "--url", brGRPC}, args...)...)
		if r.code != 0 {
			t.Fatalf("admin %v: exit %d: %s", args, r.code, r.stderr)
		}
		return r
	}
	bookieLines := func() []map[string]any {
		return jsonLines(t, admin("bookies", "list", "--output", "json").stdout)
	}
	waitFor(t, "5 live bookies in admin bookies list", 60*time.Second, func() (bool, string) {
		ls := bookieLines()
		live := 0
		for _, l := range ls {
			if l["live"] == true && l["read_only"] == false {
				live++
			}
		}
		return live == 5, fmt.Sprint(ls)
	})

	// Produce, then consume everything acknowledged.
	const topic, n = "public/default/smoke", 300
	r := runCLI(t, "", "produce", "--url", brGRPC, "--topic", topic, "--count", fmt.Sprint(n), "--size", "100", "--keys", "4", "--output", "json")
	if r.code != 0 {
		t.Fatalf("produce: exit %d: %s", r.code, r.stderr)
	}
	acked := map[string]bool{}
	for _, l := range jsonLines(t, r.stdout) {
		acked[l["id"].(string)] = true
	}
	if len(acked) != n {
		t.Fatalf("produce acknowledged %d distinct IDs, want %d", len(acked), n)
	}
	consumeAll := func(sub string) {
		t.Helper()
		r := runCLI(t, "", "consume", "--url", brGRPC, "--topic", topic, "--subscription", sub, "--from", "earliest", "--count", fmt.Sprint(n), "--output", "json")
		if r.code != 0 {
			t.Fatalf("consume %s: exit %d: %s", sub, r.code, r.stderr)
		}
		seen, dups := map[string]bool{}, 0
		for _, l := range jsonLines(t, r.stdout) {
			id := l["id"].(string)
			if seen[id] {
				dups++
			}
			seen[id] = true
		}
		var lost []string
		for id := range acked {
			if !seen[id] {
				lost = append(lost, id)
			}
		}
		t.Logf("consume %s: %d messages, %d duplicates", sub, len(seen), dups)
		if len(lost) > 0 {
			t.Fatalf("consume %s: %d acknowledged messages lost, e.g. %v", sub, len(lost), lost[:min(5, len(lost))])
		}
	}
	consumeAll("smoke-1")

	// Autorecovery is wired in the bookies: one auditor leader, the
	// under-replicated gauge on every bookie's /metrics.
	waitFor(t, "one auditor leader among the bookies", 30*time.Second, func() (bool, string) {
		leaders, gauges := 0, 0
		for _, b := range bookies {
			m := httpGet("http://" + b.http + "/metrics")
			if strings.Contains(m, "\nmeridian_autorecovery_auditor_leader 1") {
				leaders++
			}
			if strings.Contains(m, "\nmeridian_autorecovery_under_replicated_ledgers ") {
				gauges++
			}
		}
		return leaders == 1 && gauges == 5, fmt.Sprintf("leaders %d, gauges %d", leaders, gauges)
	})
	st := jsonLines(t, admin("bookies", "status", "--output", "json").stdout)
	if len(st) != 1 || st[0]["paused"] != false || !strings.HasPrefix(fmt.Sprint(st[0]["auditor"]), "bookie-") {
		t.Fatalf("bookies status: %v", st)
	}
	admin("bookies", "pause", "--reason", "smoke test")
	st = jsonLines(t, admin("bookies", "status", "--output", "json").stdout)
	if st[0]["paused"] != true || st[0]["pausedReason"] != "smoke test" {
		t.Fatalf("status after pause: %v", st)
	}
	admin("bookies", "resume")
	// The same over HTTP JSON.
	resp, err := http.Post("http://"+brHTTP+"/admin/v1/GetAutorecoveryStatus", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	var hs map[string]any
	err = json.NewDecoder(resp.Body).Decode(&hs)
	resp.Body.Close()
	if err != nil || hs["paused"] != false || len(hs["bookies"].([]any)) != 5 {
		t.Fatalf("HTTP GetAutorecoveryStatus: %v %v", hs, err)
	}
	if r := runCLI(t, "", "admin", "--url", brGRPC, "bookies", "decommission", "bad/id"); r.code == 0 || !strings.Contains(r.stderr, "bookie ID") {
		t.Fatalf("decommission bad/id: exit %d, %q", r.code, r.stderr)
	}

	// Close the topic's ledger L (ensemble b0 b1 b2, write sets {b0,b1},
	// {b1,b2}, {b2,b0}; entry 0 is on {b0,b1}). Decommission b0 and wait until no closed ledger
	// names it, then kill b0 AND b1: the entries of write set {b0,b1} are
	// readable only if autorecovery really copied b0's replicas elsewhere.
	admin("topics", "unload", topic)
	store, err := metadata.NewClient(context.Background(), []string{metaGRPC}, "local")
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	closedLedgers := func() []ledger.Metadata {
		res, err := store.List(context.Background(), ledger.LedgerKeyPrefix, metadata.Page{}, metadata.ReadOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var out []ledger.Metadata
		for _, kv := range res.KVs {
			var md ledger.Metadata
			if err := json.Unmarshal(kv.Value, &md); err != nil {
				t.Fatalf("%s: %v", kv.Key, err)
			}
			if md.State == ledger.StateClosed && md.LastEntry >= 0 {
				out = append(out, md)
			}
		}
		return out
	}
	using := func(id string) (ids []int64) {
		for _, md := range closedLedgers() {
			for _, s := range md.Segments {
				if slices.ContainsFunc(s.Ensemble, func(b topology.BookieInfo) bool { return b.ID == id }) {
					ids = append(ids, md.ID)
					break
				}
			}
		}
		return ids
	}
	var target ledger.Metadata
	waitFor(t, "a closed ledger with entries", 30*time.Second, func() (bool, string) {
		cl := closedLedgers()
		for _, md := range cl {
			if len(md.Segments) == 1 {
				target = md
				return true, ""
			}
		}
		return false, fmt.Sprintf("closed ledgers with entries: %+v", cl)
	})
	byID := map[string]*smokeBookie{}
	for _, b := range bookies {
		byID[b.id] = b
	}
	ens := target.Segments[0].Ensemble
	victim, other := byID[ens[0].ID], byID[ens[1].ID]
	t.Logf("ledger %d (entries 0..%d) on %s %s %s: decommission %s, then kill it and %s",
		target.ID, target.LastEntry, ens[0].ID, ens[1].ID, ens[2].ID, victim.id, other.id)
	admin("bookies", "decommission", victim.id)
	waitFor(t, "decommissioned "+victim.id+" drained", 90*time.Second, func() (bool, string) {
		u := using(victim.id)
		ls := bookieLines()
		return len(u) == 0 && slices.ContainsFunc(ls, func(l map[string]any) bool {
			return l["bookie_id"] == victim.id && l["decommissioned"] == true && l["under_replicated_ledgers"] == float64(0)
		}), fmt.Sprintf("closed ledgers using it: %v; bookies: %v", u, ls)
	})
	victim.p.kill()
	other.p.kill()
	waitFor(t, "killed bookies leave the registry", 30*time.Second, func() (bool, string) {
		ls := bookieLines()
		return !slices.ContainsFunc(ls, func(l map[string]any) bool {
			return (l["bookie_id"] == victim.id || l["bookie_id"] == other.id) && l["live"] == true
		}), fmt.Sprint(ls)
	})
	consumeAll("smoke-2")
	admin("bookies", "recommission", victim.id)
}
