//go:build unix

package main

import (
	"strings"
	"testing"
	"time"

	"github.com/meridianmq/meridian/chaos"
)

// TestDevFaults drives the fault controls of a `meridian dev
// --fault-injection` cluster (one region, three bookies: entries on two)
// through the CLI: slow fsyncs, a flipped journal bit on one bookie, a
// power loss of another (it dies, loses its unsynced bytes and comes back),
// a metadata clock skew, a graceful broker restart and a wiped bookie.
// Every acknowledged message is read back at the end.
func TestDevFaults(t *testing.T) {
	// A fault of one bookie at a time: a corrupt copy and a wiped copy of
	// the same entry on two bookies would be a real loss (write quorum 2).
	if testing.Short() {
		t.Skip("builds the binary and starts five processes (-short)")
	}
	dir := t.TempDir()
	cliBinary(t)
	d := startDev(t, dir, "--regions", "a", "--bookies", "3", "--racks", "1", "--brokers", "1", "--fault-injection")
	const topic = "public/default/faults"
	var acked []string
	acked = append(acked, d.produce(t, "a", topic, 30)...)

	if out := d.dev(t, "disk", "a", "0", "slow", "sync", "journal", "5ms"); strings.TrimSpace(out) != "id 1" {
		t.Fatalf("disk slow: %q", out)
	}
	acked = append(acked, d.produce(t, "a", topic, 30)...)
	d.dev(t, "disk", "a", "0", "clear")

	out := d.dev(t, "disk", "a", "1", "corrupt", "journal")
	if !strings.HasPrefix(out, "corrupt ") || !strings.Contains(out, "bookie-1") {
		t.Fatalf("disk corrupt: %q", out)
	}
	t.Logf("corrupt: %s", strings.TrimSpace(out))

	out = d.dev(t, "disk", "a", "0", "powerloss")
	if !strings.HasPrefix(out, "powerloss files=") {
		t.Fatalf("disk powerloss: %q", out)
	}
	t.Logf("powerloss: %s", strings.TrimSpace(out))
	for _, p := range d.status(t).Processes {
		if p.Name == "a/bookie-0" && p.State != chaos.StateExited {
			t.Fatalf("a/bookie-0 after the power loss: %s", p.State)
		}
	}
	d.dev(t, "start", "bookie", "a", "0")
	acked = append(acked, d.produce(t, "a", topic, 30)...)

	if out := d.dev(t, "clock", "a", "0", "+5s"); !strings.Contains(out, "clock skew 5s") {
		t.Fatalf("clock: %q", out)
	}
	acked = append(acked, d.produce(t, "a", topic, 30)...)
	// A negative skew goes after "--" (else it reads as a flag).
	if r := runCLI(t, "", "dev", "clock", "--data-dir", dir, "a", "0", "--", "-3s"); r.code != 0 || !strings.Contains(r.stdout, "clock skew -3s") {
		t.Fatalf("clock -3s: exit %d: %s %s", r.code, r.stdout, r.stderr)
	}
	acked = append(acked, d.produce(t, "a", topic, 30)...)
	d.dev(t, "clock", "a", "0", "0")

	before := 0
	for _, p := range d.status(t).Processes {
		if p.Name == "a/broker-0" {
			before = p.Starts
		}
	}
	d.dev(t, "restart", "broker", "a", "0")
	for _, p := range d.status(t).Processes {
		if p.Name == "a/broker-0" && (p.Starts != before+1 || p.State != chaos.StateRunning) {
			t.Fatalf("broker after restart: %+v (starts before %d)", p, before)
		}
	}
	acked = append(acked, d.produce(t, "a", topic, 30)...)

	// Wipe refuses a running bookie; after a kill it re-formats it. The
	// wiped bookie is the one with the flipped bit: damaging two replicas
	// of an entry (write quorum 2) would lose it for real.
	if r := runCLI(t, "", "dev", "wipe", "a", "1", "--data-dir", dir); r.code == 0 || !strings.Contains(r.stderr, "kill it first") {
		t.Fatalf("wipe of a running bookie: exit %d: %s", r.code, r.stderr)
	}
	d.dev(t, "kill", "bookie", "a", "1")
	d.dev(t, "wipe", "a", "1")
	d.dev(t, "start", "bookie", "a", "1")
	acked = append(acked, d.produce(t, "a", topic, 30)...)

	// Bad input names the field and changes nothing.
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"disk", "a", "7", "clear"}, "index"},
		{[]string{"disk", "z", "0", "clear"}, "region"},
		{[]string{"disk", "a", "0", "explode"}, "unknown verb"},
		{[]string{"clock", "a", "0", "soon"}, "skew"},
		{[]string{"clock", "a", "0", "+3h"}, "skew"},
	} {
		r := runCLI(t, "", append(append([]string{"dev"}, c.args...), "--data-dir", dir)...)
		if r.code == 0 || !strings.Contains(r.stderr, c.want) {
			t.Errorf("dev %v: exit %d, stderr %q, want an error naming %q", c.args, r.code, r.stderr, c.want)
		}
	}
	deadline := time.Now().Add(time.Minute)
	for {
		// A read may race autorecovery of the wiped bookie; retry.
		r := runCLI(t, "", "consume", "--url", d.grpc(t, "a"), "--topic", topic, "--subscription", "check", "--from", "earliest", "--count", "1", "--output", "json")
		if r.code == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Second)
	}
	d.consumeAll(t, "a", topic, "all", acked)
}
