package bookie_test

import (
	"bytes"
	"context"
	"sync"
	"testing"
	"time"

	"github.com/meridianmq/meridian/bookie"
	"github.com/meridianmq/meridian/bookie/bookietest"
)

// A power loss while adds stream in loses only what was not fsynced, and
// every acknowledged entry was fsynced: after the restart each one reads
// back intact.
func TestPowerLossKeepsAcknowledgedEntries(t *testing.T) {
	c := bookietest.StartCluster(t, 1)
	ctx := ctxT(t)
	const ledger, n = 7, 5000
	// Slow fsyncs: groups pile up written but not yet synced, so the power
	// loss has unsynced bytes to drop.
	if _, err := c.FaultFS(0).Exec("slow sync journal 20ms"); err != nil {
		t.Fatal(err)
	}
	var acked []int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		acked, _, _ = streamAdds(ctx, c.Client(0), ledger, 0, n, 512, 64)
	}()
	// Cut the power in the middle of the stream.
	waitFor(t, 30*time.Second, "some adds", func() bool {
		return metricValue(t, c.Server(0), "meridian_bookie_add_entries_total") >= 200
	})
	lines := c.PowerLoss(0)
	wg.Wait()
	t.Logf("power loss: %v; %d of %d adds acknowledged", lines, len(acked), n)
	if len(acked) == 0 {
		t.Fatal("nothing acknowledged before the power loss")
	}
	if err := c.Restart(0); err != nil {
		t.Fatal(err)
	}
	for _, e := range acked {
		got, err := read(ctx, c.Client(0), ledger, e)
		if err != nil {
			t.Fatalf("acknowledged entry %d after power loss: %v", e, err)
		}
		if !bytes.Equal(got, payloadFor(ledger, e, 512)) {
			t.Fatalf("acknowledged entry %d read back wrong", e)
		}
	}
}

// With the test-only UnsafeAckBeforeSync the same power loss loses
// acknowledged entries: the broken build the chaos suite must catch is
// really broken, and the power loss is what shows it (a kill -9 keeps the
// page cache).
func TestUnsafeAckBeforeSyncLosesAcknowledgedEntries(t *testing.T) {
	c := bookietest.StartCluster(t, 1, bookietest.WithConfig(func(i int, cfg *bookie.Config) {
		cfg.Testing.UnsafeAckBeforeSync = true
		cfg.CheckpointInterval = time.Hour
	}))
	ctx := ctxT(t)
	const ledger, n = 7, 300
	acked, failed, err := streamAdds(ctx, c.Client(0), ledger, 0, n, 512, 64)
	if err != nil || len(failed) > 0 || len(acked) != n {
		t.Fatalf("adds: %d acked, %d failed, %v", len(acked), len(failed), err)
	}
	// A kill -9 alone keeps them (the page cache survives the process).
	c.Kill(0)
	if err := c.Restart(0); err != nil {
		t.Fatal(err)
	}
	if _, err := read(ctx, c.Client(0), ledger, n-1); err != nil {
		t.Fatalf("after a plain kill: %v", err)
	}
	acked2, failed, err := streamAdds(ctx, c.Client(0), ledger, n, 2*n, 512, 64)
	if err != nil || len(failed) > 0 || len(acked2) != n {
		t.Fatalf("adds: %d acked, %d failed, %v", len(acked2), len(failed), err)
	}
	t.Logf("power loss: %v", c.PowerLoss(0))
	if err := c.Restart(0); err != nil {
		t.Fatal(err)
	}
	lost := 0
	for _, e := range acked2 {
		got, err := read(context.Background(), c.Client(0), ledger, e)
		if err != nil || !bytes.Equal(got, payloadFor(ledger, e, 512)) {
			lost++
		}
	}
	t.Logf("%d of %d acknowledged entries lost", lost, len(acked2))
	if lost == 0 {
		t.Fatal("unsafe_ack_before_sync lost no acknowledged entry on power loss")
	}
}
