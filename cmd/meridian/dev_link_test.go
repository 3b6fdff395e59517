//go:build unix

package main

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// ackedIDs are the "region/id" names of the acknowledged messages in a
// `produce --output json` output.
func ackedIDs(t *testing.T, regionName, out string) []string {
	t.Helper()
	var ids []string
	for _, l := range jsonLines(t, out) {
		ids = append(ids, regionName+"/"+l["id"].(string))
	}
	return ids
}

// TestDevClusterProcessLinks: inside a region every connection goes
// through a process link. Cutting a's broker from one bookie of its
// ensemble, writes move to another bookie (an ensemble change) and keep
// being acknowledged; cut from every bookie, they are not acknowledged;
// after heal-all they are again. No acknowledged message is lost.
func TestDevClusterProcessLinks(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and starts six processes (-short)")
	}
	dir := t.TempDir()
	cliBinary(t)
	d := startDev(t, dir, "--regions", "a", "--bookies", "4", "--brokers", "1")
	const topic = "public/default/links"
	acked := d.produce(t, "a", topic, 20)

	// The broker reaches its metadata node and bookies through its
	// process links: one is listed with the broker's dial_rewrite.
	st := d.status(t)
	bookieLinks := 0
	for _, x := range st.Proxies {
		if x.From == "a/broker-0" && strings.HasPrefix(x.To, "a/bookie-") {
			bookieLinks++
		}
	}
	if bookieLinks != 4 {
		t.Fatalf("%d process links from a/broker-0 to bookies, want 4: %+v", bookieLinks, st.Proxies)
	}

	// A shape shows in the status; heal-all removes it.
	d.dev(t, "link", "shape", "a/broker-0", "a/bookie-1", "--bandwidth", "1MB", "--drop", "0.05", "--slow-close", "1s", "--oneway")
	shaped := false
	for _, l := range d.status(t).Links {
		if l.From == "a/broker-0" && l.To == "a/bookie-1" {
			shaped = l.Bandwidth == 1e6 && l.Drop == 0.05 && l.SlowClose == "1s"
		}
		if l.From == "a/bookie-1" && l.To == "a/broker-0" {
			t.Fatalf("--oneway shaped the way back: %+v", l)
		}
	}
	if !shaped {
		t.Fatalf("shape not in status: %+v", d.status(t).Links)
	}
	d.dev(t, "link", "heal-all")
	if st := d.status(t); len(st.Links) != 0 {
		t.Fatalf("links after heal-all (one region: no region links, process links default): %+v", st.Links)
	}

	// Ensembles hold 3 of the 4 bookies: with bookie-0 and bookie-3 cut
	// in turn, a write's ensemble lost one of them at least once; each
	// time the ledger replaces it and the writes go on.
	for _, b := range []string{"a/bookie-0", "a/bookie-3"} {
		d.dev(t, "link", "cut", "a/broker-0", b)
		out := d.cli(t, "produce", "--url", d.grpc(t, "a"), "--topic", topic, "--count", "20", "--size", "32", "--send-timeout", "60s", "--output", "json")
		ids := ackedIDs(t, "a", out)
		if len(ids) != 20 {
			t.Fatalf("with %s cut from the broker: %d of 20 acknowledged", b, len(ids))
		}
		acked = append(acked, ids...)
		d.dev(t, "link", "heal", "a/broker-0", b)
	}

	// Cut from every bookie (the metadata node stays reachable): nothing
	// is acknowledged. A timed-out message may still be stored after the
	// heal (the cut stalled its bytes): only acknowledged ones count.
	d.dev(t, "link", "partition", "a/broker-0", "a/bookie-0,a/bookie-1,a/bookie-2,a/bookie-3")
	cut := 0
	for _, l := range d.status(t).Links {
		if l.Cut {
			cut++
		}
	}
	if cut != 2*4 {
		t.Fatalf("partition cut %d one-way links, want 8: %+v", cut, d.status(t).Links)
	}
	r := runCLI(t, "", "produce", "--url", d.grpc(t, "a"), "--topic", topic, "--count", "5", "--size", "32", "--send-timeout", "5s", "--output", "json")
	during := ackedIDs(t, "a", r.stdout)
	if r.code == 0 || len(during) == 5 {
		t.Fatalf("produce with the broker cut from every bookie: exit %d, %d acknowledged: %s", r.code, len(during), r.stderr)
	}
	acked = append(acked, during...)
	t.Logf("cut from every bookie: %d of 5 acknowledged (%s)", len(during), strings.TrimSpace(r.stderr))

	unacked := 5 - len(during) // stored or not: their outcome is unknown
	d.dev(t, "link", "heal-all")
	waitFor(t, "writes acknowledged after heal-all", 90*time.Second, func() (bool, string) {
		r := runCLI(t, "", "produce", "--url", d.grpc(t, "a"), "--topic", topic, "--count", "10", "--size", "32", "--send-timeout", "20s", "--output", "json")
		ids := ackedIDs(t, "a", r.stdout)
		acked = append(acked, ids...)
		unacked += 10 - len(ids)
		return r.code == 0, fmt.Sprintf("exit %d: %s", r.code, r.stderr)
	})
	// Everything stored, until 10 s without a message: the acknowledged
	// messages and perhaps some of those whose outcome is unknown.
	seen := d.consumeSuperset(t, "a", topic, "after-heal", acked)
	t.Logf("after heal: %d acknowledged, %d not, %d stored", len(acked), unacked, len(seen))
	if len(seen) > len(acked)+unacked {
		t.Fatalf("%d messages stored, more than the %d sent", len(seen), len(acked)+unacked)
	}
	d.interrupt(t, runningPIDs(t, d.status(t), 6))
}

// consumeSuperset consumes topic in a region with a new subscription from
// the earliest until 10 s pass without a message, fails if a message of
// want is missing, and returns the "origin region/origin ID" names seen.
// Unlike consumeAll it allows messages beyond want: those whose outcome is
// unknown (timed out, stored after a heal) and those replicated in.
func (d *devCluster) consumeSuperset(t *testing.T, regionName, topic, sub string, want []string) map[string]bool {
	t.Helper()
	out := d.cli(t, "consume", "--url", d.grpc(t, regionName), "--topic", topic, "--subscription", sub, "--from", "earliest", "--idle", "10s", "--output", "json")
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
	t.Logf("consume %s in %s: %d messages (%d wanted), %d duplicates", sub, regionName, len(seen), len(want), dups)
	if len(lost) > 0 {
		t.Fatalf("consume %s in %s: %d acknowledged messages lost: %v", sub, regionName, len(lost), lost)
	}
	return seen
}
