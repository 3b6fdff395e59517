//go:build unix

package main

import (
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

// Rebuilding a whole region under the same name (issue 20, item 1): the
// rebuilt region numbers its topics' entries from 1 again, and everything
// acknowledged afterwards must still reach every region.

// produceTagged sends n messages with key tag to topic in a region and
// returns their names "tag/origin region/origin ID". The tag tells apart
// the messages of a region before and after its rebuild, whose ledger
// (and so message) IDs start again and repeat.
func (d *devCluster) produceTagged(t *testing.T, regionName, topic, tag string, n int) []string {
	t.Helper()
	var names []string
	out := d.cli(t, "produce", "--url", d.grpc(t, regionName), "--topic", topic, "--count", fmt.Sprint(n), "--size", "32", "--key", tag, "--output", "json")
	for _, l := range jsonLines(t, out) {
		names = append(names, fmt.Sprint(tag, "/", l["origin_region"], "/", l["origin_id"]))
	}
	if len(names) != n {
		t.Fatalf("produce in %s: %d acknowledged, want %d", regionName, len(names), n)
	}
	return names
}

// readTagged reads topic in a region from the earliest with a reader
// (no subscription) until 3 s pass without a message, and returns how
// many times each "key/origin region/origin ID" was delivered.
func (d *devCluster) readTagged(t *testing.T, regionName, topic string) map[string]int {
	t.Helper()
	r := runCLI(t, "", "read", topic, "--url", d.grpc(t, regionName), "--from", "earliest", "--idle", "3s", "--output", "json")
	seen := map[string]int{}
	if r.code != 0 {
		// Exit 1 with no message: nothing to read (yet).
		if strings.TrimSpace(r.stdout) != "" {
			t.Fatalf("read %s in %s: exit %d: %s", topic, regionName, r.code, r.stderr)
		}
		return seen
	}
	for _, l := range jsonLines(t, r.stdout) {
		seen[fmt.Sprint(l["key"], "/", l["origin_region"], "/", l["origin_id"])]++
	}
	return seen
}

// waitTagged polls readTagged until every message of each want group is
// in the region or the deadline passes (then it fails naming, per group,
// how many are missing: "b misses 50 of a-new"). It returns the last
// read and its duplicate count.
func (d *devCluster) waitTagged(t *testing.T, regionName, topic string, timeout time.Duration, want map[string][]string) (map[string]int, int) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		seen := d.readTagged(t, regionName, topic)
		var miss []string
		for _, group := range slices.Sorted(maps.Keys(want)) {
			n := 0
			for _, id := range want[group] {
				if seen[id] == 0 {
					n++
				}
			}
			if n > 0 {
				miss = append(miss, fmt.Sprintf("%s misses %d of %d %s", regionName, n, len(want[group]), group))
			}
		}
		dups := 0
		for _, c := range seen {
			dups += c - 1
		}
		if len(miss) == 0 {
			return seen, dups
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %s (%d distinct messages read, %d duplicates)", timeout, strings.Join(miss, ", "), len(seen), dups)
		}
		time.Sleep(time.Second)
	}
}

// TestDevRegionRebuild (MERIDIAN_LONG=1, `make test-long`): two regions
// replicating public/default; 100 produced in a and 20 in b reach the
// other region. The operator steps of docs/geo/dev.md: a is taken out of
// the replication list (b's replicator cursors towards a deleted), then
// `meridian dev region-rebuild a` wipes a (brokers, bookie, regional
// metadata shard; the global shard stays) and starts it empty under the
// same name: its topic numbers entries from 1 again. b goes on producing
// (10), a is put back in the list with --wait (b backfills a), and 50
// more are produced in a and 20 in b. b holds everything it held plus the
// 50 (it failed with "b misses 50 of 50 a-new" before origin
// incarnations); a holds b's 50 and its own new 50; a's first 100 survive
// in b only (a message never returns to its origin). Duplicates are
// counted and logged.
func TestDevRegionRebuild(t *testing.T) {
	if os.Getenv("MERIDIAN_LONG") == "" {
		t.Skip("MERIDIAN_LONG not set (make test-long)")
	}
	dir := t.TempDir()
	cliBinary(t)
	d := startDev(t, dir, "--regions", "a,b", "--bookies", "1", "--brokers", "1")
	B := d.grpc(t, "b")
	const topic = "public/default/rebuild"
	d.cli(t, "admin", "--url", B, "namespaces", "set-replication", "public/default", "--regions", "a,b")

	oldA := d.produceTagged(t, "a", topic, "a-old", 100)
	oldB := d.produceTagged(t, "b", topic, "b-old", 20)
	d.waitTagged(t, "b", topic, 60*time.Second, map[string][]string{"a-old": oldA, "b-old": oldB})
	d.waitTagged(t, "a", topic, 60*time.Second, map[string][]string{"a-old": oldA, "b-old": oldB})

	// Operator step 1: b's cursors meridian.repl.a will stand past what a
	// loses; delete them with a out of the list, before the rebuilt a
	// takes any newer entry of b (after which a would answer b's older
	// ones DUPLICATE: docs/geo/dev.md).
	out := d.cli(t, "admin", "--url", B, "namespaces", "set-replication", "public/default", "--regions", "b", "--yes")
	if !strings.Contains(out, "region b: deleted the cursors meridian.repl.a") {
		t.Fatalf("set-replication --regions b --yes: %q", out)
	}

	// An unknown region is refused naming it, and changes nothing.
	if r := runCLI(t, "", "dev", "region-rebuild", "z", "--data-dir", dir); r.code == 0 || !strings.Contains(r.stderr, `region "z" is not one of a,b`) {
		t.Fatalf("region-rebuild z: exit %d, stderr %q", r.code, r.stderr)
	}
	starts := map[string]int{}
	for _, p := range d.status(t).Processes {
		starts[p.Name] = p.Starts
	}
	out = d.dev(t, "region-rebuild", "a")
	t.Logf("region-rebuild a: %s", strings.TrimSpace(out))
	if !strings.Contains(out, "region a rebuilt empty") {
		t.Fatalf("region-rebuild a: %q", out)
	}
	// Every process of a started once more and runs; b's were untouched.
	for _, p := range d.status(t).Processes {
		want := starts[p.Name]
		if p.Region == "a" {
			want++
		}
		if p.Starts != want || p.State != "running" {
			t.Fatalf("after the rebuild: %s %s, %d starts (want running, %d)", p.Name, p.State, p.Starts, want)
		}
	}
	// a is empty: the topic's old entries are gone with its bookie and
	// its ledger list.
	if seen := d.readTagged(t, "a", topic); len(seen) != 0 {
		t.Fatalf("rebuilt a still reads %d messages of %s", len(seen), topic)
	}
	midB := d.produceTagged(t, "b", topic, "b-mid", 10)

	// Operator step 2: a back in the list; b's new replicators start at
	// b's earliest entry and backfill a.
	d.cli(t, "admin", "--url", B, "namespaces", "set-replication", "public/default", "--regions", "a,b", "--wait", "--wait-timeout", "60s")

	newA := d.produceTagged(t, "a", topic, "a-new", 50)
	newB := d.produceTagged(t, "b", topic, "b-new", 20)
	seenB, dupsB := d.waitTagged(t, "b", topic, 60*time.Second, map[string][]string{"a-new": newA, "a-old": oldA, "b-old": oldB, "b-mid": midB, "b-new": newB})
	seenA, dupsA := d.waitTagged(t, "a", topic, 60*time.Second, map[string][]string{"a-new": newA, "b-old": oldB, "b-mid": midB, "b-new": newB})
	oldInA := 0
	for _, id := range oldA {
		oldInA += min(seenA[id], 1)
	}
	t.Logf("b: %d distinct, %d duplicates; a: %d distinct, %d duplicates, %d of a's %d messages from before the rebuild (they survive in b only)",
		len(seenB), dupsB, len(seenA), dupsA, oldInA, len(oldA))
}
