package ledger_test

import (
	"context"
	"errors"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/meridianmq/meridian/bookie/ledger"
)

// TestEnsembleChangeOnBookieFailure stops (or kills) an ensemble bookie in
// the middle of a stream of adds: the writer must carry on through an
// ensemble change and every acknowledged entry must read back.
func TestEnsembleChangeOnBookieFailure(t *testing.T) {
	for _, mode := range []string{"stop", "kill"} {
		t.Run(mode, func(t *testing.T) {
			e := newEnv(t, 4)
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
			waitFor(t, 30*time.Second, "200 acks", func() bool { return a.count() >= 200 })

			md, err := c.Metadata(ctx, w.ID())
			if err != nil {
				t.Fatal(err)
			}
			victim := md.Segments[0].Ensemble[1].ID
			before := a.count()
			if mode == "stop" {
				e.bk.Stop(e.index(victim))
			} else {
				e.bk.Kill(e.index(victim))
			}
			t.Logf("%s %s after %d acks", mode, victim, before)
			waitFor(t, 60*time.Second, "300 more acks", func() bool { return a.count() >= before+300 })
			close(stop)
			<-done
			if len(a.errs) > 0 {
				t.Fatalf("writer failed: %v", a.errs[0])
			}
			if err := w.Close(ctx); err != nil {
				t.Fatal(err)
			}
			md, err = c.Metadata(ctx, w.ID())
			if err != nil {
				t.Fatal(err)
			}
			if len(md.Segments) < 2 {
				t.Fatalf("no ensemble change recorded: %+v", md.Segments)
			}
			for _, b := range md.Segments[len(md.Segments)-1].Ensemble {
				if b.ID == victim {
					t.Fatalf("failed bookie %s still in the last ensemble", victim)
				}
			}
			if md.LastEntry != a.last() {
				t.Fatalf("closed at %d, last acknowledged %d", md.LastEntry, a.last())
			}
			r, err := c.Open(ctx, w.ID())
			if err != nil {
				t.Fatal(err)
			}
			verify(t, r, a)
		})
	}
}

// TestFsyncErrorMovesOn makes one ensemble bookie's fsyncs fail: it must
// not acknowledge the entries it could not persist, and the writer must
// move on through an ensemble change without losing anything.
func TestFsyncErrorMovesOn(t *testing.T) {
	e := newEnv(t, 4)
	c := e.client(nil)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	w, err := c.Create(ctx, ledger.CreateOptions{Ensemble: 3, WriteQuorum: 3, AckQuorum: 2})
	if err != nil {
		t.Fatal(err)
	}
	a := newAckLog()
	stop := make(chan struct{})
	done := appender(w, "w", a, stop, 1000)
	waitFor(t, 30*time.Second, "100 acks", func() bool { return a.count() >= 100 })
	md, err := c.Metadata(ctx, w.ID())
	if err != nil {
		t.Fatal(err)
	}
	victim := e.index(md.Segments[0].Ensemble[0].ID)
	before := a.count()
	e.bk.FaultFS(victim).FailSyncs("")
	waitFor(t, 60*time.Second, "300 more acks", func() bool { return a.count() >= before+300 })
	close(stop)
	<-done
	if len(a.errs) > 0 {
		t.Fatalf("writer failed: %v", a.errs[0])
	}
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if !e.bk.Info(victim).ReadOnly {
		t.Errorf("bookie %d with failing fsync is not read-only", victim)
	}
	md, err = c.Metadata(ctx, w.ID())
	if err != nil {
		t.Fatal(err)
	}
	if len(md.Segments) < 2 {
		t.Fatalf("no ensemble change after fsync errors: %+v", md.Segments)
	}
	r, err := c.Open(ctx, w.ID())
	if err != nil {
		t.Fatal(err)
	}
	verify(t, r, a)
}

// TestRollingBookieFailures kills and restarts bookies one after another
// under a running writer (several ensemble changes, restarted bookies back
// in the pool), then recovers the ledger from another client while the
// writer is still running. Set LEDGER_SOAK_ROUNDS for a longer run.
func TestRollingBookieFailures(t *testing.T) {
	rounds := 3
	if v, err := strconv.Atoi(os.Getenv("LEDGER_SOAK_ROUNDS")); err == nil && v > 0 {
		rounds = v
	}
	e := newEnv(t, 5)
	c := e.client(nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(60+30*rounds)*time.Second)
	defer cancel()
	w, err := c.Create(ctx, ledger.CreateOptions{Ensemble: 3, WriteQuorum: 3, AckQuorum: 2})
	if err != nil {
		t.Fatal(err)
	}
	a := newAckLog()
	stop := make(chan struct{})
	done := appender(w, "w", a, stop, 300)
	for round := range rounds {
		before := a.count()
		waitFor(t, 30*time.Second, "acks before a failure", func() bool { return a.count() >= before+150 })
		md, err := c.Metadata(ctx, w.ID())
		if err != nil {
			t.Fatal(err)
		}
		ens := md.Segments[len(md.Segments)-1].Ensemble
		victim := e.index(ens[round%len(ens)].ID)
		e.bk.Kill(victim)
		mid := a.count()
		waitFor(t, 30*time.Second, "acks after the failure", func() bool { return a.count() >= mid+150 })
		if err := e.bk.Restart(victim); err != nil {
			t.Fatal(err)
		}
		t.Logf("round %d: killed and restarted %s; %d acks, %d segments", round, e.bk.ID(victim), a.count(), len(md.Segments))
	}
	r, err := e.client(nil).OpenRecover(ctx, w.ID())
	if err != nil {
		t.Fatal(err)
	}
	close(stop)
	<-done
	for _, err := range a.errs {
		if !errors.Is(err, ledger.ErrLedgerFenced) {
			t.Fatalf("writer failed with %v before the recovery fenced it", err)
		}
	}
	md := r.Metadata()
	if len(md.Segments) < rounds+1 {
		t.Errorf("%d segments after %d bookie failures", len(md.Segments), rounds)
	}
	verify(t, r, a)
}
