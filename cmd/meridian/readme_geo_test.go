package main

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestREADMEGeoWalkthrough runs the README's three-region walk-through
// ("Three regions, active-active") command by command against `meridian
// dev` as the README starts it, secured (the default): the tools get no
// credential flags and find the CA and the admin token through the
// cluster file. One bookie and one broker per region keep it small; the
// commands and their order are the README's. Every region's 5 messages
// reach c once each (0 lost, duplicates counted); the ones produced
// during the a↔b cut reach every region after the heal.
func TestREADMEGeoWalkthrough(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and starts nine processes (-short)")
	}
	dir := t.TempDir()
	cliBinary(t)
	d := startDev(t, dir, "--regions", "a,b,c", "--wan-latency", "40ms", "--jitter", "5ms", "--bookies", "1", "--brokers", "1")
	if d.info.CA == "" || d.info.AdminToken == "" {
		t.Fatalf("the walk-through's cluster is not secured: %+v", d.info)
	}
	A := d.grpc(t, "a")
	const topic = "public/default/orders"

	d.cli(t, "admin", "--url", A, "namespaces", "set-replication", "public/default", "--regions", "a,b,c", "--wait")
	if out := d.cli(t, "admin", "--url", A, "regions", "list"); !strings.Contains(out, "b") || !strings.Contains(out, "c") {
		t.Fatalf("regions list: %q", out)
	}
	var acked []string
	for _, r := range []string{"a", "b", "c"} {
		acked = append(acked, d.produceCount(t, r, topic, 5)...)
	}
	// c's consumer sees all 15, each origin once.
	d.consumeAll(t, "c", topic, "s", acked)

	d.dev(t, "link", "cut", "a", "b")
	acked = append(acked, d.produceCount(t, "a", topic, 5)...)
	acked = append(acked, d.produceCount(t, "b", topic, 5)...)
	if out := d.cli(t, "admin", "--url", A, "topics", "stats", topic); !strings.Contains(out, "b") {
		t.Fatalf("topics stats during the cut: %q", out)
	}
	d.dev(t, "link", "heal", "a", "b")
	// Everything converges: all 25 in every region (c relayed between a
	// and b during the cut).
	for _, r := range []string{"a", "b", "c"} {
		d.waitAll(t, r, topic, fmt.Sprintf("after-heal-%s", r), acked, 2*time.Minute)
	}

	d.dev(t, "link", "latency", "a", "c", "150ms", "--jitter", "10ms")
	d.dev(t, "kill", "broker", "a", "0")
	d.dev(t, "start", "broker", "a", "0")
	if out := d.dev(t, "status"); !strings.Contains(out, "running") {
		t.Fatalf("dev status: %q", out)
	}
	more := d.produceCount(t, "a", topic, 5)
	d.consumeAll(t, "a", topic, "after-restart", append(acked, more...))
	st := d.status(t)
	d.interrupt(t, runningPIDs(t, st, 9))
}

// produceCount is the README's `produce --url R --topic T --count n
// --output json`, with the acknowledged IDs named as produce names them.
func (d *devCluster) produceCount(t *testing.T, regionName, topic string, n int) []string {
	t.Helper()
	var ids []string
	for _, l := range jsonLines(t, d.cli(t, "produce", "--url", d.grpc(t, regionName), "--topic", topic, "--count", fmt.Sprint(n), "--output", "json")) {
		ids = append(ids, regionName+"/"+fmt.Sprint(l["id"]))
	}
	if len(ids) != n {
		t.Fatalf("produce in %s: %d acknowledged, want %d", regionName, len(ids), n)
	}
	return ids
}

// waitAll consumes from the earliest on a new subscription until every
// message of want is there (replication may still be on its way), failing
// after timeout with the ones missing.
func (d *devCluster) waitAll(t *testing.T, regionName, topic, sub string, want []string, timeout time.Duration) {
	t.Helper()
	var missing []string
	deadline := time.Now().Add(timeout)
	for attempt := 0; ; attempt++ {
		s := fmt.Sprintf("%s-%d", sub, attempt)
		r := runCLI(t, "", "consume", "--url", d.grpc(t, regionName), "--topic", topic, "--subscription", s, "--from", "earliest", "--count", fmt.Sprint(len(want)), "--idle", "10s", "--output", "json")
		seen, dups := map[string]bool{}, 0
		for _, l := range jsonLines(t, r.stdout) {
			id := fmt.Sprint(l["origin_region"], "/", l["origin_id"])
			if seen[id] {
				dups++
			}
			seen[id] = true
		}
		missing = missing[:0]
		for _, id := range want {
			if !seen[id] {
				missing = append(missing, id)
			}
		}
		if len(missing) == 0 {
			t.Logf("%s in %s: all %d acknowledged messages, %d duplicates", sub, regionName, len(want), dups)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s in %s: %d acknowledged messages lost after %v: %v", sub, regionName, len(missing), timeout, missing)
		}
		time.Sleep(time.Second)
	}
}
