//go:build unix

package main

import (
	"fmt"
	"testing"
)

// regionPowerLoss cuts the power of every bookie of a one-region dev
// cluster at once after acknowledged writes, kills the broker (so that no
// cache serves the messages), starts everything again and returns how many
// acknowledged messages are missing from a read from the earliest.
func regionPowerLoss(t *testing.T, unsafe bool) (acked, lost int) {
	dir := t.TempDir()
	cliBinary(t)
	args := []string{"--regions", "a", "--bookies", "3", "--racks", "1", "--brokers", "1", "--fault-injection"}
	if unsafe {
		args = append(args, "--unsafe-ack-before-sync")
	}
	d := startDev(t, dir, args...)
	const topic = "public/default/powerloss"
	ids := d.produce(t, "a", topic, 200)
	for i := range 3 {
		t.Logf("bookie %d: %s", i, d.dev(t, "disk", "a", fmt.Sprint(i), "powerloss"))
	}
	d.dev(t, "kill", "broker", "a", "0")
	for i := range 3 {
		d.dev(t, "start", "bookie", "a", fmt.Sprint(i))
	}
	d.dev(t, "start", "broker", "a", "0")
	r := runCLI(t, "", "consume", "--url", d.grpc(t, "a"), "--topic", topic, "--subscription", "check", "--from", "earliest", "--idle", "15s", "--output", "json")
	seen := map[string]bool{}
	for _, l := range jsonLines(t, r.stdout) {
		seen[fmt.Sprint(l["origin_region"], "/", l["origin_id"])] = true
	}
	for _, id := range ids {
		if !seen[id] {
			lost++
		}
	}
	t.Logf("unsafe=%v: %d acknowledged, %d read back, %d lost (consume exit %d %s)", unsafe, len(ids), len(seen), lost, r.code, r.stderr)
	return len(ids), lost
}

// TestDevRegionPowerLoss: a power loss of every bookie of a region loses
// no acknowledged message (each was fsynced on a write quorum before its
// ack).
func TestDevRegionPowerLoss(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and starts five processes (-short)")
	}
	if _, lost := regionPowerLoss(t, false); lost > 0 {
		t.Fatalf("%d acknowledged messages lost to a power loss", lost)
	}
}

// TestDevRegionPowerLossUnsafe is the proof that the chaos suite's broken
// build is detectable: with --unsafe-ack-before-sync the same power loss
// loses acknowledged messages.
func TestDevRegionPowerLossUnsafe(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and starts five processes (-short)")
	}
	if _, lost := regionPowerLoss(t, true); lost == 0 {
		t.Fatal("unsafe_ack_before_sync: a power loss of every bookie lost no acknowledged message")
	}
}
