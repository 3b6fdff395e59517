package ledger_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/meridianmq/meridian/bookie/ledger"
)

// TestReadFromOtherReplica reads a closed ledger while one, then two, of
// its three replicas are down: every entry comes from a live replica.
func TestReadFromOtherReplica(t *testing.T) {
	e := newEnv(t, 3)
	c := e.client(func(c *ledger.Config) { c.SpeculativeReadDelay = 20 * time.Millisecond })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	w, err := c.Create(ctx, ledger.CreateOptions{Ensemble: 3, WriteQuorum: 3, AckQuorum: 2})
	if err != nil {
		t.Fatal(err)
	}
	a := newAckLog()
	for i := range 60 {
		p := fmt.Sprintf("e%d", i)
		id, err := w.Append(ctx, []byte(p))
		a.record(id, p, err)
	}
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	md, err := c.Metadata(ctx, w.ID())
	if err != nil {
		t.Fatal(err)
	}
	for k := range 2 {
		e.bk.Kill(e.index(md.Segments[0].Ensemble[k].ID))
		r, err := c.Open(ctx, w.ID())
		if err != nil {
			t.Fatal(err)
		}
		if !r.IsClosed() || r.LastAddConfirmed() != 59 {
			t.Fatalf("closed=%v lac=%d, want closed at 59", r.IsClosed(), r.LastAddConfirmed())
		}
		verify(t, r, a)
	}
	// All replicas down: a clear read error, not "no such entry".
	e.bk.Kill(e.index(md.Segments[0].Ensemble[2].ID))
	r, err := c.Open(ctx, w.ID())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Read(ctx, 0, 0); !errors.Is(err, ledger.ErrReadFailed) {
		t.Fatalf("read with every replica down: %v, want ErrReadFailed", err)
	}
}

// TestNotEnoughBookiesForEnsembleChange kills an ensemble bookie when no
// spare bookie exists: the writer fails with ErrNotEnoughBookies, and a
// recovery still finds every acknowledged entry.
func TestNotEnoughBookiesForEnsembleChange(t *testing.T) {
	e := newEnv(t, 3)
	c := e.client(nil)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	w, err := c.Create(ctx, ledger.CreateOptions{Ensemble: 3, WriteQuorum: 3, AckQuorum: 2})
	if err != nil {
		t.Fatal(err)
	}
	a := newAckLog()
	stop := make(chan struct{})
	done := appender(w, "w", a, stop, 100)
	waitFor(t, 30*time.Second, "100 acks", func() bool { return a.count() >= 100 })
	md, err := c.Metadata(ctx, w.ID())
	if err != nil {
		t.Fatal(err)
	}
	e.bk.Kill(e.index(md.Segments[0].Ensemble[0].ID))
	waitFor(t, 60*time.Second, "the writer to fail", func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		return len(a.errs) > 0
	})
	close(stop)
	<-done
	if !errors.Is(a.errs[0], ledger.ErrNotEnoughBookies) {
		t.Fatalf("writer failed with %v, want ErrNotEnoughBookies", a.errs[0])
	}
	// Qw-Qa+1 = 2 of the 3 bookies are alive: recovery can proceed.
	r, err := e.client(nil).OpenRecover(ctx, w.ID())
	if err != nil {
		t.Fatal(err)
	}
	verify(t, r, a)
}

func TestLedgerKey(t *testing.T) {
	for _, id := range []int64{0, 1, 99, 1 << 40, 1<<63 - 1} {
		k := ledger.LedgerKey(id)
		if len(k) != len(ledger.LedgerKeyPrefix)+20 {
			t.Errorf("LedgerKey(%d) = %q: not 20 digits", id, k)
		}
		if got, ok := ledger.ParseLedgerKey(k); !ok || got != id {
			t.Errorf("ParseLedgerKey(%q) = %d, %v", k, got, ok)
		}
	}
	if ledger.LedgerKey(9) >= ledger.LedgerKey(10) {
		t.Error("keys do not sort in ID order")
	}
	for _, k := range []string{"ledgers/12", "ledgers/0000000000000000000x", "other/00000000000000000001"} {
		if _, ok := ledger.ParseLedgerKey(k); ok {
			t.Errorf("ParseLedgerKey(%q) accepted", k)
		}
	}
}
