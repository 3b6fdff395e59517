package bookie_test

import (
	"errors"
	"slices"
	"testing"

	bookiev1 "github.com/meridianmq/meridian/api/bookie/v1"
	"github.com/meridianmq/meridian/bookie"
	"github.com/meridianmq/meridian/bookie/bookietest"
)

func TestFenceRejectsAddsAllowsRecoveryAndPersists(t *testing.T) {
	c := bookietest.StartCluster(t, 1)
	ctx := ctxT(t)
	cl := c.Client(0)
	for e := int64(0); e < 10; e++ {
		if err := add(ctx, cl, 1, e, payloadFor(1, e, 64)); err != nil {
			t.Fatal(err)
		}
	}
	fr, err := cl.Fence(ctx, &bookiev1.FenceRequest{LedgerId: 1})
	if err != nil {
		t.Fatal(err)
	}
	if fr.LastEntryId != 9 || fr.LastAddConfirmed != 8 {
		t.Fatalf("fence returned last=%d lac=%d, want 9, 8", fr.LastEntryId, fr.LastAddConfirmed)
	}
	if err := add(ctx, cl, 1, 10, payloadFor(1, 10, 64)); !errors.Is(err, bookie.ErrLedgerFenced) {
		t.Fatalf("add after fence: %v, want ErrLedgerFenced", err)
	}
	_, err = cl.AddEntry(ctx, &bookiev1.AddEntryRequest{LedgerId: 1, EntryId: 10, Payload: payloadFor(1, 10, 64), LastAddConfirmed: 9, RecoveryAdd: true})
	if err != nil {
		t.Fatalf("recovery add on fenced ledger: %v", err)
	}
	// Read-for-recovery fences a ledger this bookie has never seen.
	_, err = cl.ReadEntry(ctx, &bookiev1.ReadEntryRequest{LedgerId: 2, EntryId: -1, Fence: true})
	if !errors.Is(bookie.FromStatus(err), bookie.ErrNoSuchEntry) {
		t.Fatalf("fencing read of empty ledger: %v, want ErrNoSuchEntry", err)
	}
	// The fence survives a crash (journal replay) and a clean restart (checkpoint).
	for _, how := range []string{"kill", "stop"} {
		if how == "kill" {
			c.Kill(0)
		} else {
			c.Stop(0)
		}
		if err := c.Restart(0); err != nil {
			t.Fatal(err)
		}
		cl = c.Client(0)
		for _, l := range []int64{1, 2} {
			if err := add(ctx, cl, l, 11, payloadFor(l, 11, 64)); !errors.Is(err, bookie.ErrLedgerFenced) {
				t.Fatalf("after %s: add to ledger %d: %v, want ErrLedgerFenced", how, l, err)
			}
		}
		if got, err := read(ctx, cl, 1, 10); err != nil || string(got) != string(payloadFor(1, 10, 64)) {
			t.Fatalf("after %s: recovery-added entry: %v", how, err)
		}
	}
}

// A fence racing a pipelined stream of adds splits it cleanly: every add
// acknowledged is reported by the fence, every later one is refused.
func TestFenceRacingAdds(t *testing.T) {
	c := bookietest.StartCluster(t, 1)
	ctx := ctxT(t)
	cl := c.Client(0)
	type res struct {
		acked  []int64
		failed map[int64]error
		err    error
	}
	done := make(chan res, 1)
	go func() {
		a, f, err := streamAdds(ctx, cl, 5, 0, 3000, 200, 300)
		done <- res{a, f, err}
	}()
	waitFor(t, 30*1e9, "some adds", func() bool {
		r, err := cl.ReadLastAddConfirmed(ctx, &bookiev1.ReadLastAddConfirmedRequest{LedgerId: 5})
		return err == nil && r.LastEntryId >= 100
	})
	fr, err := cl.Fence(ctx, &bookiev1.FenceRequest{LedgerId: 5})
	if err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	slices.Sort(r.acked)
	for i, e := range r.acked {
		if e != int64(i) {
			t.Fatalf("acked entries not a prefix: position %d holds %d", i, e)
		}
	}
	t.Logf("fence at last=%d; %d acked, %d refused", fr.LastEntryId, len(r.acked), len(r.failed))
	if int64(len(r.acked)) != fr.LastEntryId+1 {
		t.Fatalf("fence reported last=%d but %d entries were acknowledged", fr.LastEntryId, len(r.acked))
	}
	for e, err := range r.failed {
		if !errors.Is(err, bookie.ErrLedgerFenced) {
			t.Fatalf("entry %d failed with %v, want ErrLedgerFenced", e, err)
		}
	}
}
