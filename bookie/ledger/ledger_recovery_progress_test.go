package ledger_test

import (
	"context"
	"testing"
	"time"

	bookiev1 "github.com/meridianmq/meridian/api/bookie/v1"
	"github.com/meridianmq/meridian/bookie/ledger"
)

// TestRecoveryReplacesDeadBookie recovers a Qw=Qa ledger whose last
// segment has one bookie gone for good. The tail must be re-added, and it
// cannot reach Qa on the old ensemble: recovery must move the tail to a
// replacement bookie instead of failing forever. Nothing acknowledged may
// be lost, and the dead bookie must not be in the closed ledger's last
// segment.
func TestRecoveryReplacesDeadBookie(t *testing.T) {
	e := newEnv(t, 4)
	cw, cr := e.client(nil), e.client(nil)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	w, err := cw.Create(ctx, ledger.CreateOptions{Ensemble: 3, WriteQuorum: 3, AckQuorum: 3})
	if err != nil {
		t.Fatal(err)
	}
	a := newAckLog()
	stop := make(chan struct{})
	done := appender(w, "w", a, stop, 100)
	waitFor(t, 30*time.Second, "300 acks", func() bool { return a.count() >= 300 })
	close(stop)
	<-done
	if len(a.errs) > 0 {
		t.Fatalf("writer failed: %v", a.errs[0])
	}
	md, err := cr.Metadata(ctx, w.ID())
	if err != nil {
		t.Fatal(err)
	}
	// Every bookie piggybacks the LAC it saw with the last add, which is
	// below the last entry: recovery has at least one entry to re-add.
	victim := md.Segments[len(md.Segments)-1].Ensemble[1].ID
	e.bk.Kill(e.index(victim))
	t.Logf("killed %s for good after %d acks (last %d)", victim, a.count(), a.last())

	var r *ledger.Reader
	start := time.Now()
	waitFor(t, 60*time.Second, "recovery without the dead bookie", func() bool {
		r, err = cr.OpenRecover(ctx, w.ID())
		if err != nil {
			t.Logf("recovery attempt: %v", err)
		}
		return err == nil
	})
	t.Logf("recovered in %v", time.Since(start))
	md, err = cr.Metadata(ctx, w.ID())
	if err != nil {
		t.Fatal(err)
	}
	if md.State != ledger.StateClosed {
		t.Fatalf("ledger %s after recovery", md.State)
	}
	last := md.Segments[len(md.Segments)-1]
	for _, b := range last.Ensemble {
		if b.ID == victim {
			t.Fatalf("dead bookie %s still in the last segment %+v", victim, last)
		}
	}
	verify(t, r, a)
	// The re-added tail is on every bookie of the new segment's write sets.
	for en := last.FirstEntry; en <= md.LastEntry; en++ {
		for _, b := range last.Ensemble {
			resp, err := e.bk.Client(e.index(b.ID)).ReadEntry(ctx, &bookiev1.ReadEntryRequest{LedgerId: w.ID(), EntryId: en})
			if err != nil || len(resp.Payload) == 0 {
				t.Fatalf("entry %d not on %s of the new segment: %v", en, b.ID, err)
			}
		}
	}
	// A second recovery returns the same closed view.
	r2, err := cw.OpenRecover(ctx, w.ID())
	if err != nil || r2.LastAddConfirmed() != r.LastAddConfirmed() {
		t.Fatalf("second OpenRecover = %v; want end %d", err, r.LastAddConfirmed())
	}
}
