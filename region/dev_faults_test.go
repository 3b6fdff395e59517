//go:build unix

package region

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/meridianmq/meridian/chaos"
)

func devForFaults(t *testing.T, fault, unsafe bool) *Dev {
	t.Helper()
	cfg := devTestConfig(t.TempDir())
	cfg.FaultInjection, cfg.UnsafeAckBeforeSync = fault, unsafe
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	plan, err := newDevPlan(cfg)
	if err != nil {
		t.Fatal(err)
	}
	plan.closeListeners() // as after the process that picked them exited
	log := slog.New(slog.DiscardHandler)
	d := &Dev{cfg: cfg, plan: plan, log: log, net: chaos.NewNetwork(log)}
	t.Cleanup(d.net.Close)
	if err := d.writeConfigs(); err != nil {
		t.Fatal(err)
	}
	return d
}

// FaultInjection puts fault_injection (and unsafe_ack_before_sync) into
// the bookies' and metadata nodes' configs, never into the brokers'.
func TestDevFaultConfigs(t *testing.T) {
	cfg := devTestConfig(t.TempDir())
	cfg.UnsafeAckBeforeSync = true
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "--unsafe-ack-before-sync") {
		t.Fatalf("unsafe without fault injection: %v", err)
	}
	for _, tc := range []struct{ fault, unsafe bool }{{false, false}, {true, false}, {true, true}} {
		d := devForFaults(t, tc.fault, tc.unsafe)
		for _, f := range []struct {
			name          string
			fault, unsafe bool
		}{{"a/meta-0.yaml", tc.fault, false}, {"b/bookie-2.yaml", tc.fault, tc.unsafe}, {"c/broker-1.yaml", false, false}} {
			b, err := os.ReadFile(filepath.Join(d.cfg.DataDir, f.name))
			if err != nil {
				t.Fatal(err)
			}
			s := string(b)
			if got := strings.Contains(s, "fault_injection: true"); got != f.fault {
				t.Errorf("%+v: %s has fault_injection %v, want %v", tc, f.name, got, f.fault)
			}
			if got := strings.Contains(s, "unsafe_ack_before_sync: true"); got != f.unsafe {
				t.Errorf("%+v: %s has unsafe_ack_before_sync %v, want %v", tc, f.name, got, f.unsafe)
			}
		}
	}
}

// Disk and clock requests: 409 without FaultInjection, bad input names
// the field.
func TestDevFaultRequests(t *testing.T) {
	ctx := context.Background()
	off := devForFaults(t, false, false)
	if _, err := off.Disk(ctx, DevDiskRequest{Region: "a", Command: "full on"}); !errors.Is(err, errConflict) {
		t.Fatalf("disk without fault injection: %v", err)
	}
	if _, err := off.Clock(ctx, DevClockRequest{Region: "a", Skew: "1s"}); !errors.Is(err, errConflict) {
		t.Fatalf("clock without fault injection: %v", err)
	}
	on := devForFaults(t, true, false)
	for _, c := range []struct {
		err  error
		want string
	}{
		{func() error { _, err := on.Disk(ctx, DevDiskRequest{Region: "z", Command: "full on"}); return err }(), "region"},
		{func() error {
			_, err := on.Disk(ctx, DevDiskRequest{Region: "a", Index: 3, Command: "full on"})
			return err
		}(), "index"},
		{func() error { _, err := on.Disk(ctx, DevDiskRequest{Region: "a", Command: " "}); return err }(), "command"},
		{func() error { _, err := on.Clock(ctx, DevClockRequest{Region: "a", Skew: "later"}); return err }(), "skew"},
		{func() error { _, err := on.Clock(ctx, DevClockRequest{Region: "a", Skew: "-2h"}); return err }(), "skew"},
		{func() error { _, err := on.Clock(ctx, DevClockRequest{Region: "a", Index: 1, Skew: "1s"}); return err }(), "index"},
		// Not started: the processes are not running.
		{func() error { _, err := on.Disk(ctx, DevDiskRequest{Region: "a", Command: "full on"}); return err }(), "not running"},
		{on.Process(ctx, DevProcessRequest{Op: "wipe", Role: RoleBroker, Region: "a"}), "role"},
		{on.Process(ctx, DevProcessRequest{Op: "explode", Role: RoleBroker, Region: "a"}), "op"},
	} {
		if c.err == nil || !strings.Contains(c.err.Error(), c.want) {
			t.Errorf("error %v does not name %q", c.err, c.want)
		}
	}
}

// A rebuilt region's new regional shard ID is above every ID given so
// far, retired ones included, and the metadata node's config names it
// with the region's name, beside the unchanged global shard.
func TestDevRebuildShardID(t *testing.T) {
	d := devForFaults(t, false, false)
	given := map[uint64]bool{1: true}
	for _, r := range d.plan.Regions {
		given[r.ShardID] = true
	}
	for _, name := range []string{"a", "c", "a", "b"} {
		next := nextShardID(d.plan)
		if given[next] {
			t.Fatalf("rebuild of %s: shard ID %d was given before (%v)", name, next, given)
		}
		given[next] = true
		ri := slices.IndexFunc(d.plan.Regions, func(r DevRegionPlan) bool { return r.Name == name })
		d.plan.Regions[ri].ShardID = next
		cfg := d.metaConfig(d.plan.Regions[ri], 0)
		shards := cfg["shards"].([]map[string]any)
		if shards[0]["name"] != "global" || shards[0]["shard_id"] != 1 || shards[1]["name"] != name || shards[1]["shard_id"] != next {
			t.Fatalf("rebuild of %s: meta config shards %v, want global 1 and %s %d", name, shards, name, next)
		}
	}
	if err := (&Dev{plan: d.plan}).checkRegion("region", "z"); err == nil || !strings.Contains(err.Error(), `region: region "z" is not one of a,b,c`) {
		t.Fatalf("unknown region: %v", err)
	}
}
