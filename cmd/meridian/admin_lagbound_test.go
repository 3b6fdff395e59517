package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/meridianmq/meridian/broker"
	"github.com/meridianmq/meridian/metadata"
	"github.com/meridianmq/meridian/region/regiontest"
)

// TestCLIReplicationLagBound: `admin namespaces|topics
// set-/get-/remove-replication-lag-bound` and
// `set-/get-/remove-replication-backlog-quota` against a region whose
// namespace replicates to region b, registered at an address nothing
// listens on (its lag only grows). Bad input (a negative or zero
// --max-lag, an unknown --action, an unknown region in --regions) is
// refused with one line naming the flag and changes nothing; `namespaces
// policies` shows the bound. With producer_error, `produce` fails at once
// with "replication lag to region b is ...s, bound 1s" (before the fix it
// hung until its send timeout). reset-cursor and subscription delete of
// the replicator cursor are refused.
func TestCLIReplicationLagBound(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and starts a region (-short)")
	}
	rc := regiontest.Start(t, regiontest.Options{Brokers: 1, Bookies: 1})
	rec := broker.RegionRecord{Name: "b", Brokers: map[string]broker.RegionBroker{"b-0": {GRPC: "127.0.0.1:1", UpdatedMs: time.Now().UnixMilli()}}}
	val, _ := json.Marshal(rec)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := rc.Global.Put(ctx, "regions/b", val, metadata.AnyVersion, 0); err != nil {
		t.Fatal(err)
	}
	url := rc.Addrs()[0]
	adm := func(args ...string) []string { return append([]string{"admin", "--url", url}, args...) }
	ok := func(args ...string) cliResult {
		t.Helper()
		r := runCLI(t, "", args...)
		if r.code != 0 {
			t.Fatalf("%v: exit %d: %s", args, r.code, r.stderr)
		}
		return r
	}
	refused := func(mention []string, args ...string) {
		t.Helper()
		r := runCLI(t, "", args...)
		if r.code == 0 || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
			t.Fatalf("%v: exit %d, stderr %q; want a one-line error", args, r.code, r.stderr)
		}
		for _, m := range mention {
			if !strings.Contains(r.stderr, m) {
				t.Fatalf("%v: stderr %q does not name %q", args, r.stderr, m)
			}
		}
	}
	pol := func(r cliResult) map[string]any {
		t.Helper()
		ls := jsonLines(t, r.stdout)
		if len(ls) != 1 {
			t.Fatalf("want one JSON line: %q", r.stdout)
		}
		return ls[0]["policies"].(map[string]any)
	}
	const ns, topic = "public/lag", "public/lag/t"
	ok(adm("namespaces", "create", ns)...)
	ok(adm("namespaces", "set-replication", ns, "--regions", regiontest.Region+",b")...)

	// Bad input: refused, naming the flag; nothing changes.
	refused([]string{"--max-lag"}, adm("namespaces", "set-replication-lag-bound", ns, "--max-lag", "-2s", "--action", "producer_error")...)
	refused([]string{"--max-lag"}, adm("namespaces", "set-replication-lag-bound", ns, "--max-lag", "0", "--action", "producer_error")...)
	refused([]string{"--max-lag"}, adm("namespaces", "set-replication-lag-bound", ns, "--action", "producer_error")...)
	refused([]string{"--action", "drop"}, adm("namespaces", "set-replication-lag-bound", ns, "--max-lag", "2s", "--action", "drop")...)
	refused([]string{"--regions", `"zz"`}, adm("namespaces", "set-replication-lag-bound", ns, "--max-lag", "2s", "--action", "producer_error", "--regions", "b,zz")...)
	refused([]string{"--regions", `"zz"`}, adm("topics", "set-replication-lag-bound", topic, "--max-lag", "2s", "--regions", "zz")...)
	refused([]string{"--policy"}, adm("namespaces", "set-replication-backlog-quota", ns, "--limit", "1M", "--policy", "consumer_backlog_eviction")...)
	refused([]string{"--limit"}, adm("namespaces", "set-replication-backlog-quota", ns, "--limit", "-5")...)
	if p := pol(ok(adm("namespaces", "get-replication-lag-bound", ns, "--output", "json")...)); p["max_replication_lag_ms"] != float64(0) {
		t.Fatalf("after refused sets: %v, want no bound", p)
	}

	// Topic level: set, read (own and applied), remove (inherits again).
	ok(adm("topics", "set-replication-lag-bound", topic+"-2", "--max-lag", "1h", "--action", "producer_hold")...)
	if p := pol(ok(adm("topics", "get-replication-lag-bound", topic+"-2", "--output", "json")...)); p["max_replication_lag_ms"] != float64(3600000) ||
		p["max_replication_lag_action"] != "QUOTA_ACTION_PRODUCER_HOLD" {
		t.Fatalf("topic lag bound: %v", p)
	}
	if p := pol(ok(adm("topics", "get-replication-lag-bound", topic+"-2", "--applied", "--output", "json")...)); p["max_replication_lag_ms"] != float64(3600000) {
		t.Fatalf("applied topic lag bound: %v", p)
	}
	ok(adm("topics", "remove-replication-lag-bound", topic+"-2")...)
	if p := pol(ok(adm("topics", "get-replication-lag-bound", topic+"-2", "--output", "json")...)); p["max_replication_lag_ms"] != nil {
		t.Fatalf("topic lag bound after remove: %v, want inherited (null)", p)
	}

	// The replication backlog quota.
	ok(adm("namespaces", "set-replication-backlog-quota", ns, "--limit", "1G", "--policy", "producer_exception")...)
	if p := pol(ok(adm("namespaces", "get-replication-backlog-quota", ns, "--output", "json")...)); p["replication_backlog_quota_bytes"] != float64(1<<30) ||
		p["replication_backlog_quota_action"] != "QUOTA_ACTION_PRODUCER_ERROR" {
		t.Fatalf("replication backlog quota: %v", p)
	}

	// Namespace bound, producer_error: the send past it fails at once.
	ok(adm("namespaces", "set-replication-lag-bound", ns, "--max-lag", "1s", "--action", "producer_error", "--regions", "b")...)
	if p := pol(ok(adm("namespaces", "get-replication-lag-bound", ns, "--output", "json")...)); p["max_replication_lag_ms"] != float64(1000) ||
		p["max_replication_lag_action"] != "QUOTA_ACTION_PRODUCER_ERROR" || len(p["max_replication_lag_regions"].([]any)) != 1 {
		t.Fatalf("namespace lag bound: %v", p)
	}
	if r := ok(adm("namespaces", "policies", ns)...); !strings.Contains(r.stdout, "1000") || !strings.Contains(strings.ToLower(r.stdout), "replication") ||
		!strings.Contains(r.stdout, "PRODUCER_ERROR") {
		t.Fatalf("namespaces policies does not show the bound: %s", r.stdout)
	}
	ok("produce", "--url", url, "--topic", topic, "--message", "first")
	var last cliResult
	deadline := time.Now().Add(60 * time.Second)
	for {
		// A send timeout far above the bound: the refusal must not wait for it.
		last = runCLI(t, "", "produce", "--url", url, "--topic", topic, "--message", "probe", "--send-timeout", "60s")
		if last.code != 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("produce still accepted 60 s past a 1 s lag bound")
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("produce past the bound: exit %d: %s", last.code, strings.TrimSpace(last.stderr))
	if !strings.Contains(last.stderr, "replication lag to region b is ") || !strings.Contains(last.stderr, "bound 1s") ||
		strings.Contains(last.stderr, "send timeout") {
		t.Fatalf("produce past the bound: %q, want the lag to region b and the bound at once (not a send timeout)", last.stderr)
	}

	// Operator commands do not reach the replicator cursor (item 4).
	refused([]string{"meridian.repl.b", "replicator cursor"}, adm("topics", "reset-cursor", topic, "-s", "meridian.repl.b", "--earliest")...)
	refused([]string{"meridian.repl.b", "still a replication region"}, adm("subscriptions", "delete", topic, "meridian.repl.b", "--force")...)

	// Removed: sends are stored again.
	ok(adm("namespaces", "remove-replication-lag-bound", ns)...)
	if p := pol(ok(adm("namespaces", "get-replication-lag-bound", ns, "--output", "json")...)); p["max_replication_lag_ms"] != float64(0) {
		t.Fatalf("after remove: %v", p)
	}
	ok("produce", "--url", url, "--topic", topic, "--message", "after")
}
