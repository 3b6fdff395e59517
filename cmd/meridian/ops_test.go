package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meridianmq/meridian/client"
	"github.com/meridianmq/meridian/metadata"
	"gopkg.in/yaml.v3"
)

// Operator gaps and surprising defaults found by the process-level fault
// runs of issue 7.

// TestCLIOperatorGaps runs one standalone and checks: admin accepts a
// broker list; produce JSON lines carry the producer name and the
// acknowledgement time; consume --idle ends with 0 after a drain;
// standalone keeps data by default; a topic that retains nothing is
// announced by produce (once) and by topics stats.
func TestCLIOperatorGaps(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and starts a region (-short)")
	}
	url := cliStandalone(t)
	dead := cliFreeAddr(t) // nothing listens there
	ok := func(args ...string) cliResult {
		t.Helper()
		r := runCLI(t, "", args...)
		if r.code != 0 {
			t.Fatalf("%v: exit %d: %s", args, r.code, r.stderr)
		}
		return r
	}

	// admin --url a,b: like produce and consume, a dead first broker is
	// skipped (both the client-based and the direct gRPC commands).
	ok("admin", "--url", dead+","+url, "tenants", "list")
	if r := ok("admin", "--url", dead+","+url, "bookies", "list", "--output", "json"); len(jsonLines(t, r.stdout)) != 1 {
		t.Fatalf("bookies list through a list of brokers: %q", r.stdout)
	}
	if r := runCLI(t, "", "admin", "--url", "nocolon,"+url, "bookies", "list"); r.code == 0 || !strings.Contains(r.stderr, `"nocolon"`) {
		t.Fatalf("bad address in the list: exit %d, %q", r.code, r.stderr)
	}

	// Standalone's public/default keeps data: 7 days / 10 GiB.
	r := ok("admin", "--url", url, "namespaces", "policies", "public/default", "--output", "json")
	if p := jsonLines(t, r.stdout); len(p) != 1 || p[0]["retentionTimeSeconds"] != float64(604800) || p[0]["retentionSizeBytes"] != float64(10737418240) {
		t.Fatalf("standalone default retention: %q", r.stdout)
	}

	// produce --output json: producer name and acknowledgement time; no
	// retention warning where data is kept.
	const topic = "public/default/ops"
	before := time.Now()
	r = ok("produce", "--url", url, "--topic", topic, "--count", "3", "--producer-name", "ops-producer", "--output", "json")
	if strings.Contains(r.stderr, "warning") {
		t.Fatalf("retention warning on a namespace that keeps data: %q", r.stderr)
	}
	lines := jsonLines(t, r.stdout)
	if len(lines) != 3 {
		t.Fatalf("produce printed %d lines: %q", len(lines), r.stdout)
	}
	for _, l := range lines {
		at, err := time.Parse(time.RFC3339Nano, fmt.Sprint(l["ack_time"]))
		if l["producer"] != "ops-producer" || err != nil || at.Before(before.Add(-time.Minute)) || at.After(time.Now().Add(time.Minute)) {
			t.Fatalf("produce line %v (ack_time: %v)", l, err)
		}
	}

	// consume --idle: a drain that got messages ends with 0; one that got
	// nothing, or fewer than --count, is still an error.
	r = ok("consume", "--url", url, "--topic", topic, "--subscription", "drain", "--from", "earliest", "--idle", "3s", "--output", "json")
	if n := len(jsonLines(t, r.stdout)); n != 3 {
		t.Fatalf("idle drain printed %d lines, want 3", n)
	}
	if r := runCLI(t, "", "consume", "--url", url, "--topic", topic, "--subscription", "drain", "--idle", "1s"); r.code == 0 || !strings.Contains(r.stderr, "no message") {
		t.Fatalf("idle with nothing received: exit %d, %q", r.code, r.stderr)
	}

	// A namespace that retains nothing: produce warns once on stderr,
	// topics stats says so (text and JSON).
	ok("admin", "--url", url, "namespaces", "create", "public/volatile")
	ok("admin", "--url", url, "namespaces", "set-policies", "public/volatile", "--retention-time", "0s", "--retention-size", "0")
	const vtopic = "public/volatile/t"
	r = ok("produce", "--url", url, "--topic", vtopic, "--count", "5")
	if strings.Count(r.stderr, "warning: ") != 1 || !strings.Contains(r.stderr, "retains nothing") {
		t.Fatalf("produce to a topic that retains nothing: stderr %q", r.stderr)
	}
	r = ok("admin", "--url", url, "topics", "stats", vtopic)
	if !strings.Contains(r.stdout, "note: ") || !strings.Contains(r.stdout, "retains nothing") {
		t.Fatalf("topics stats text: %q", r.stdout)
	}
	r = ok("admin", "--url", url, "topics", "stats", vtopic, "--output", "json")
	if st := jsonLines(t, r.stdout); len(st) != 1 || st[0]["retainsNothing"] != true {
		t.Fatalf("topics stats json: %q", r.stdout)
	}
	// With a subscription the data is kept: no warning, no flag.
	ok("admin", "--url", url, "subscriptions", "create", vtopic, "keep", "--from", "earliest")
	r = ok("produce", "--url", url, "--topic", vtopic, "--count", "1")
	if strings.Contains(r.stderr, "warning") {
		t.Fatalf("warning with a subscription: %q", r.stderr)
	}
	r = ok("admin", "--url", url, "topics", "stats", vtopic, "--output", "json")
	if st := jsonLines(t, r.stdout); len(st) != 1 || st[0]["retainsNothing"] == true {
		t.Fatalf("topics stats json with a subscription: %q", r.stdout)
	}
}

// TestCLIInternalStatsSaysWhenAcksAreCut acknowledges every other one of
// 2 100 entries: internal-stats lists the first 1 000 individually
// acknowledged entries, and says how many there are and that the list
// was cut.
func TestCLIInternalStatsSaysWhenAcksAreCut(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and starts a region (-short)")
	}
	url := cliStandalone(t)
	const topic, n = "public/default/many-acks", 2100
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, err := client.New(ctx, client.Options{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	defer closeQuietly(c)
	co, err := c.Subscribe(ctx, client.ConsumerOptions{Topic: topic, Subscription: "odd", InitialPosition: client.Earliest})
	if err != nil {
		t.Fatal(err)
	}
	p, err := c.NewProducer(ctx, client.ProducerOptions{Topic: topic, BatchingMaxMessages: 1, BlockIfQueueFull: true})
	if err != nil {
		t.Fatal(err)
	}
	var sendErr error
	for i := range n {
		p.SendAsync(ctx, &client.Message{Payload: []byte(fmt.Sprint(i))}, func(_ client.MessageID, _ *client.Message, err error) {
			if err != nil && sendErr == nil {
				sendErr = err // callbacks run one at a time
			}
		})
	}
	if err := p.Flush(ctx); err != nil || sendErr != nil {
		t.Fatal(err, sendErr)
	}
	for i := range n {
		m, err := co.Receive(ctx)
		if err != nil {
			t.Fatalf("receive %d: %v", i, err)
		}

		if i%2 == 1 { // entry 0 stays unacknowledged: mark-delete cannot move
			if err := co.Ack(ctx, m.ID); err != nil {
				t.Fatal(err)
			}
		}
	}
	var cur map[string]any
	waitFor(t, "1050 individually acknowledged entries in internal-stats", 60*time.Second, func() (bool, string) {
		r := runCLI(t, "", "admin", "--url", url, "topics", "internal-stats", topic, "--output", "json")
		st := jsonLines(t, r.stdout)
		if r.code != 0 || len(st) != 1 {
			return false, r.stderr
		}
		cs, _ := st[0]["cursors"].([]any)
		if len(cs) != 1 {
			return false, r.stdout
		}
		cur = cs[0].(map[string]any)
		return cur["individuallyAckedCount"] == float64(1050), fmt.Sprint(cur["individuallyAckedCount"])
	})
	if cur["individuallyAckedTruncated"] != true || len(cur["individuallyAcked"].([]any)) != 1000 {
		t.Fatalf("internal-stats cursor: truncated %v, %d ranges listed", cur["individuallyAckedTruncated"], len(cur["individuallyAcked"].([]any)))
	}
}

// TestSampleDefaultsAgree: the broker's placement default equals what
// the samples (broker and bookie autorecovery) say, and every sample uses
// region "local".
func TestSampleDefaultsAgree(t *testing.T) {
	sample, err := loadBrokerConfig(readSample(t, "broker.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	bare, err := loadBrokerConfig([]byte("broker:\n  region: local\nmetadata:\n  endpoints: [127.0.0.1:1]\n"))
	if err != nil {
		t.Fatal(err)
	}
	_, _, plan, err := loadBookieConfig([]byte("id: b\njournal_dir: /tmp/x\nmetadata:\n  endpoints: [a:1]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if bare.Placement.MinRacksPerWriteQuorum != sample.Placement.MinRacksPerWriteQuorum || plan.placement.MinRacksPerWriteQuorum != sample.Placement.MinRacksPerWriteQuorum {
		t.Fatalf("min_racks_per_write_quorum: broker default %d, bookie autorecovery default %d, broker.yaml %d",
			bare.Placement.MinRacksPerWriteQuorum, plan.placement.MinRacksPerWriteQuorum, sample.Placement.MinRacksPerWriteQuorum)
	}
	if sample.Broker.Region != "local" {
		t.Fatalf("broker.yaml region %q", sample.Broker.Region)
	}
	var bk struct {
		Region string `yaml:"region"`
	}
	if err := yaml.Unmarshal(readSample(t, "bookie.yaml"), &bk); err != nil || bk.Region != "local" {
		t.Fatalf("bookie.yaml region %q (%v)", bk.Region, err)
	}
	metas, err := filepath.Glob(filepath.Join(sampleDir, "meta*.yaml"))
	if err != nil || len(metas) == 0 {
		t.Fatalf("meta samples: %v %v", metas, err)
	}
	for _, p := range metas {
		cfg, err := metadata.LoadNodeConfig(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range cfg.Shards {
			if s.Name != metadata.GlobalShard && s.Name != "local" {
				t.Fatalf("%s: shard %q; every sample uses region \"local\"", p, s.Name)
			}
		}
	}
}
