package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/meridianmq/meridian/internal/wire"
)

// jsonInt reads a JSON number, or a decimal string (protojson's int64).
func jsonInt(v any) int64 {
	switch x := v.(type) {
	case float64:
		return int64(x)
	case string:
		var n int64
		_, _ = fmt.Sscan(x, &n)
		return n
	}
	return -1
}

// TestCLIPartitionedTopics drives the partitioned-topic commands, with
// --output json, and produce/consume on a partitioned topic's name
// against a standalone region: keys land on their hash's partition and
// keep their order; lowering is refused naming the current count; stats
// aggregate; bad flags are refused before connecting.
func TestCLIPartitionedTopics(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and starts a region (-short)")
	}
	url := cliStandalone(t)
	run := func(args ...string) cliResult {
		t.Helper()
		return runCLI(t, "", args...)
	}
	ok := func(args ...string) cliResult {
		t.Helper()
		r := run(args...)
		if r.code != 0 {
			t.Fatalf("%v: exit %d: %s", args, r.code, r.stderr)
		}
		return r
	}
	refused := func(part string, args ...string) {
		t.Helper()
		r := run(args...)
		if r.code == 0 || !strings.Contains(r.stderr, part) || strings.Count(strings.TrimSpace(r.stderr), "\n") > 1 {
			t.Fatalf("%v: exit %d, stderr %q; want a short refusal naming %s", args, r.code, r.stderr, part)
		}
	}
	adm := func(args ...string) []string { return append([]string{"admin", "--url", url}, args...) }
	topic := "public/default/cli-parts"

	refused("--partitions (-p) is required", adm("topics", "create-partitioned-topic", topic)...)
	refused("--partitions 0: want 1..1024", adm("topics", "create-partitioned-topic", topic, "-p", "0")...)
	refused("--partitions 5000: want 1..1024", adm("topics", "create-partitioned", topic, "-p", "5000")...)
	r := ok(adm("topics", "get-partitioned-topic-metadata", topic, "--output", "json")...)
	if ls := jsonLines(t, r.stdout); len(ls) != 1 || jsonInt(ls[0]["partitions"]) != 0 {
		t.Fatalf("metadata before create (nothing changed): %q", r.stdout)
	}

	r = ok(adm("topics", "create-partitioned", topic, "-p", "3", "--output", "json")...)
	if ls := jsonLines(t, r.stdout); len(ls) != 1 || ls[0]["result"] != "ok" || ls[0]["partitions"] != float64(3) {
		t.Fatalf("create: %q", r.stdout)
	}
	r = ok(adm("topics", "get-partitioned-topic-metadata", topic, "--output", "json")...)
	if ls := jsonLines(t, r.stdout); len(ls) != 1 || ls[0]["partitions"] != float64(3) || ls[0]["topic"] != topic {
		t.Fatalf("metadata: %q", r.stdout)
	}
	r = ok(adm("topics", "list-partitioned-topics", "public/default", "--output", "json")...)
	if strings.TrimSpace(r.stdout) != `{"topics":[{"topic":"`+topic+`","partitions":3}]}` {
		t.Fatalf("list-partitioned-topics: %q", r.stdout)
	}
	refused("is a partitioned topic", adm("topics", "create", topic)...)
	r = ok(adm("topics", "get-partitioned-topic-metadata", topic)...)
	if strings.TrimSpace(r.stdout) != topic+" partitions=3" {
		t.Fatalf("metadata text: %q", r.stdout)
	}

	// produce and consume take the partitioned name as it is.
	r = ok("produce", "--url", url, "--topic", topic, "--count", "30", "--keys", "5", "--output", "json")
	produced := jsonLines(t, r.stdout)
	if len(produced) != 30 {
		t.Fatalf("produce: %q", r.stdout)
	}
	wantIDs := map[string][]string{} // key -> "partition/id" in send order
	for _, l := range produced {
		key, _ := l["key"].(string)
		p, has := l["partition"]
		if !has || jsonInt(p) != int64(wire.KeyPartition(key, 3)) {
			t.Fatalf("produce line %v: want partition %d for key %q", l, wire.KeyPartition(key, 3), key)
		}
		wantIDs[key] = append(wantIDs[key], fmt.Sprintf("%v/%v", jsonInt(p), l["id"]))
	}
	r = ok("consume", "--url", url, "--topic", topic, "--subscription", "s", "--from", "earliest", "--count", "30", "--output", "json")
	gotIDs := map[string][]string{}
	for _, l := range jsonLines(t, r.stdout) {
		key, _ := l["key"].(string)
		gotIDs[key] = append(gotIDs[key], fmt.Sprintf("%v/%v", jsonInt(l["partition"]), l["id"]))
	}
	for k, want := range wantIDs {
		if strings.Join(gotIDs[k], ",") != strings.Join(want, ",") {
			t.Fatalf("key %q: consumed %v, produced %v (order per key)", k, gotIDs[k], want)
		}
	}

	refused("current count is 3", adm("topics", "update-partitioned-topic", topic, "-p", "2")...)
	refused("--partitions -1: want 1..1024", adm("topics", "update-partitions", topic, "-p", "-1")...)
	r = ok(adm("topics", "update-partitions", topic, "-p", "4", "--output", "json")...)
	if ls := jsonLines(t, r.stdout); len(ls) != 1 || ls[0]["partitions"] != float64(4) {
		t.Fatalf("update: %q", r.stdout)
	}

	r = ok(adm("topics", "partitioned-stats", topic, "--per-partition", "--output", "json")...)
	ls := jsonLines(t, r.stdout)
	if len(ls) != 1 || ls[0]["partitions"] != float64(4) || jsonInt(ls[0]["msgsInTotal"]) != 30 || jsonInt(ls[0]["missingPartitions"]) != 1 {
		t.Fatalf("partitioned-stats: %q", r.stdout)
	}
	if ps, _ := ls[0]["partitionStats"].([]any); len(ps) != 3 {
		t.Fatalf("partitioned-stats per partition: %d entries in %q", len(ps), r.stdout)
	}
	r = ok(adm("topics", "partitioned-stats", topic)...)
	if !strings.Contains(r.stdout, "1 of 4 partitions have no topic") {
		t.Fatalf("partitioned-stats text: %q", r.stdout)
	}

	// perf runs on the partitioned name too (all 4 partitions now).
	r = ok("perf", "e2e", "--url", url, "--topic", topic, "--rate", "300", "--size", "64", "--duration", "2s",
		"--output", "json", "--subscription", "perf", "--drain", "3s")
	if ls := jsonLines(t, r.stdout); len(ls) != 1 || jsonInt(ls[0]["messages"]) < 100 {
		t.Fatalf("perf e2e: %q", r.stdout)
	}
	r = ok(adm("topics", "partitioned-stats", topic, "--output", "json")...)
	if ls := jsonLines(t, r.stdout); len(ls) != 1 || jsonInt(ls[0]["missingPartitions"]) != 0 || ls[0]["partitionStats"] != nil && len(ls[0]["partitionStats"].([]any)) != 0 {
		t.Fatalf("partitioned-stats after perf: %q", r.stdout)
	}

	r = ok(adm("topics", "delete-partitioned-topic", topic, "--output", "json")...)
	if ls := jsonLines(t, r.stdout); len(ls) != 1 || ls[0]["deleted_partitions"] != float64(4) {
		t.Fatalf("delete: %q", r.stdout)
	}
	refused("not partitioned", adm("topics", "delete-partitioned-topic", topic)...)
}
