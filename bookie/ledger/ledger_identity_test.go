package ledger_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	bookiev1 "github.com/meridianmq/meridian/api/bookie/v1"

	"github.com/meridianmq/meridian/bookie"
	"github.com/meridianmq/meridian/bookie/bookietest"
	"github.com/meridianmq/meridian/bookie/ledger"
)

// createTailOnFirstPair creates an E3/Qw2/Qa2 ledger with c, writes to it
// with writeUntilTailOnFirstPair and returns the writer, what was
// acknowledged and the indexes in e of the bookies at the first two places
// of its last segment (the tail's replicas).
func createTailOnFirstPair(t *testing.T, ctx context.Context, e *env, c *ledger.Client, n int) (*ledger.Writer, *ackLog, int, int) {
	t.Helper()
	w, err := c.Create(ctx, ledger.CreateOptions{Ensemble: 3, WriteQuorum: 2, AckQuorum: 2})
	if err != nil {
		t.Fatal(err)
	}
	a := newAckLog()
	writeUntilTailOnFirstPair(t, ctx, w, a, n)
	md, err := c.Metadata(ctx, w.ID())
	if err != nil {
		t.Fatal(err)
	}
	ens := md.Segments[len(md.Segments)-1].Ensemble
	return w, a, e.index(ens[0].ID), e.index(ens[1].ID)
}

// writeUntilTailOnFirstPair appends entries synchronously (each one
// acknowledged) until at least n were written and the last one's write set
// is ensemble positions {0, 1} (E3/Qw2: entry e goes to e%3 and e%3+1).
// Then position 2 does not hold the last entry, and the last entry's only
// replicas are positions 0 and 1.
func writeUntilTailOnFirstPair(t *testing.T, ctx context.Context, w *ledger.Writer, a *ackLog, n int) {
	t.Helper()
	for i := 0; ; i++ {
		p := fmt.Sprintf("m-%d", i)
		id, err := w.Append(ctx, []byte(p))
		a.record(id, p, err)
		if err != nil {
			t.Fatalf("append %d: %v", i, err)
		}
		if i+1 >= n && id%3 == 0 {
			return
		}
	}
}

// TestWipedBookieRecoveryDoesNotTruncate is issue 7's wiped-bookie
// scenario at E3/Qw2/Qa2: the writer's client goes away mid-stream, one
// bookie of the open ledger loses its disk and comes back re-formatted,
// and the other replica of the tail is unreachable. Recovery must not
// take the wiped bookie's empty answer as proof that the tail was never
// written (Qw-Qa+1 = 1 "not found" would be enough): the re-formatted
// bookie is in limbo and answers "ledger unknown", so recovery waits, and
// once the other replica is back it recovers everything acknowledged.
// With the limbo answer turned into "not found" (the previous behaviour of
// a wiped bookie), the first OpenRecover closes the ledger short.
func TestWipedBookieRecoveryDoesNotTruncate(t *testing.T) {
	e := newEnv(t, 3, bookietestLimbo())
	c1 := e.client(nil)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	w, a, wiped, down := createTailOnFirstPair(t, ctx, e, c1, 200)
	// The broker dies: its ledger client goes, the ledger stays open.
	c1.Close()

	e.bk.Wipe(wiped)
	if err := e.bk.Restart(wiped); !errors.Is(err, bookie.ErrCookie) {
		t.Fatalf("wiped bookie restarted without format: %v, want ErrCookie", err)
	}
	if _, err := e.bk.Format(wiped); err != nil {
		t.Fatal(err)
	}
	if err := e.bk.Restart(wiped); err != nil {
		t.Fatal(err)
	}
	if !e.bk.Server(wiped).InLimbo() {
		t.Fatal("re-formatted bookie not in limbo")
	}
	e.bk.Stop(down)

	c2 := e.client(nil)
	rctx, rcancel := context.WithTimeout(ctx, 30*time.Second)
	r, err := c2.OpenRecover(rctx, w.ID())
	rcancel()
	if err == nil {
		t.Fatalf("LOST: recovery closed the ledger at %d with the tail's only live replica wiped (last acknowledged %d)", r.LastAddConfirmed(), a.last())
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		// A very slow machine: still undecided, which is what matters.
	case !errors.Is(err, ledger.ErrLedgerRecovering):
		t.Fatalf("OpenRecover: %v, want ErrLedgerRecovering", err)
	case !strings.Contains(err.Error(), bookie.ReasonLedgerUnknown):
		t.Errorf("recovery error does not mention %q: %v", bookie.ReasonLedgerUnknown, err)
	}
	t.Logf("recovery waits as it must: %v", err)

	if err := e.bk.Restart(down); err != nil {
		t.Fatal(err)
	}
	var rd *ledger.Reader
	waitFor(t, 60*time.Second, "recovery with every replica back", func() bool {
		rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
		defer rcancel()
		rd, err = c2.OpenRecover(rctx, w.ID())
		if err != nil {
			t.Logf("OpenRecover: %v", err)
		}
		return err == nil
	})
	verify(t, rd, a)
}

// bookietestLimbo makes a re-formatted bookie check for the end of its
// limbo often (not needed for correctness; keeps logs short).
func bookietestLimbo() bookietest.Option {
	return bookietest.WithConfig(func(_ int, cfg *bookie.Config) { cfg.LimboCheckInterval = 100 * time.Millisecond })
}

// TestImpostorBookieRejected starts another bookie process on a dead
// bookie's address: one with the dead bookie's ID but a fresh disk (so a
// new instance), and one with another ID. The ledger client names the
// instance it means in every request, the impostor refuses with "wrong
// bookie", and recovery neither counts the impostor's fence nor takes its
// empty disk for absence.
func TestImpostorBookieRejected(t *testing.T) {
	for _, kind := range []string{"same-id", "other-id", "legacy"} {
		t.Run(kind, func(t *testing.T) {
			e := newEnv(t, 3)
			c1 := e.client(nil)
			ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
			defer cancel()
			w, a, dead, down := createTailOnFirstPair(t, ctx, e, c1, 50)
			c1.Close()
			addr := e.bk.Addr(dead)
			e.bk.Kill(dead)
			e.bk.Stop(down)

			var stopImpostor func()
			if kind == "legacy" {
				stopImpostor = startLegacyImpostor(t, addr)
			} else {
				cfg := bookie.DefaultConfig()
				cfg.ID = "impostor"
				if kind == "same-id" {
					cfg.ID = e.bk.ID(dead)
				}
				cfg.JournalDir = t.TempDir()
				cfg.ListenAddr = addr
				cfg.HTTPAddr = ""
				cfg.Logger = slog.New(slog.DiscardHandler)
				var imp *bookie.Server
				waitFor(t, 20*time.Second, "impostor listening on "+addr, func() bool {
					s, err := bookie.NewServer(cfg)
					if err != nil {
						t.Fatal(err)
					}
					if err := s.Start(ctx); err != nil {
						return false
					}
					imp = s
					return true
				})
				stopImpostor = imp.Stop
			}
			defer stopImpostor()

			c2 := e.client(nil)
			rctx, rcancel := context.WithTimeout(ctx, 20*time.Second)
			r, err := c2.OpenRecover(rctx, w.ID())
			rcancel()
			if err == nil {
				t.Fatalf("LOST: recovery closed the ledger at %d through an impostor (last acknowledged %d)", r.LastAddConfirmed(), a.last())
			}
			if !strings.Contains(err.Error(), bookie.ReasonWrongBookie) {
				t.Fatalf("OpenRecover: %v, want the impostor's %q", err, bookie.ReasonWrongBookie)
			}
			t.Logf("impostor rejected: %v", err)

			// The real bookies come back: recovery completes, nothing lost.
			stopImpostor()
			if err := e.bk.Restart(down); err != nil {
				t.Fatal(err)
			}
			if err := e.bk.Restart(dead); err != nil {
				t.Fatal(err)
			}
			var rd *ledger.Reader
			waitFor(t, 60*time.Second, "recovery with the real bookies", func() bool {
				rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
				defer rcancel()
				rd, err = c2.OpenRecover(rctx, w.ID())
				return err == nil
			})
			verify(t, rd, a)
		})
	}
}

// legacyImpostor is a bookie server that checks no identity and sends no
// identity headers (an old or foreign process): it fences anything and
// stores nothing.
type legacyImpostor struct {
	bookiev1.UnimplementedBookieServer
}

func (legacyImpostor) Fence(context.Context, *bookiev1.FenceRequest) (*bookiev1.FenceResponse, error) {
	return &bookiev1.FenceResponse{LastEntryId: -1, LastAddConfirmed: -1}, nil
}

func (legacyImpostor) ReadEntry(context.Context, *bookiev1.ReadEntryRequest) (*bookiev1.ReadEntryResponse, error) {
	return nil, status.Error(codes.NotFound, bookie.ReasonNoSuchLedger)
}

func (legacyImpostor) ReadLastAddConfirmed(context.Context, *bookiev1.ReadLastAddConfirmedRequest) (*bookiev1.ReadLastAddConfirmedResponse, error) {
	return nil, status.Error(codes.NotFound, bookie.ReasonNoSuchLedger)
}

// startLegacyImpostor serves a legacyImpostor on addr until the returned
// func is called.
func startLegacyImpostor(t *testing.T, addr string) func() {
	t.Helper()
	var lis net.Listener
	waitFor(t, 20*time.Second, "legacy impostor listening on "+addr, func() bool {
		l, err := net.Listen("tcp", addr)
		if err != nil {
			return false
		}
		lis = l
		return true
	})
	srv := grpc.NewServer(grpc.ForceServerCodecV2(bookie.Codec()))
	bookiev1.RegisterBookieServer(srv, legacyImpostor{})
	go func() { _ = srv.Serve(lis) }()
	var once sync.Once
	return func() { once.Do(srv.Stop) }
}

// TestCreateAfterFormatSkipsLimboIDs: a client that reserved a range of
// ledger IDs before a bookie was re-formatted must not create new ledgers
// with IDs from that range on the re-formatted bookie. The bookie is in
// limbo for every ID below the counter it read at the format, so it
// refuses normal adds to them; with no spare bookie (3 bookies, E3) the
// writer cannot replace it, and every new ledger failed at its first add
// (a broker unloaded and reloaded its topic each second until the limbo
// ended: the chaos smoke's redelivery storm). Create skips the rest of the
// reserved range instead: a new reservation starts at or above the limit.
func TestCreateAfterFormatSkipsLimboIDs(t *testing.T) {
	e := newEnv(t, 3, bookietestLimbo())
	c := e.client(nil) // IDBatch 100: the first Create reserves [0, 100)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	w0, err := c.Create(ctx, ledger.CreateOptions{Ensemble: 3, WriteQuorum: 2, AckQuorum: 2})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		if _, err := w0.Append(ctx, []byte(fmt.Sprintf("old-%d", i))); err != nil {
			t.Fatalf("append to ledger %d: %v", w0.ID(), err)
		}
	}
	// Ledger w0 stays open and names every bookie: the limbo lasts.
	const wiped = 0
	e.bk.Wipe(wiped)
	if _, err := e.bk.Format(wiped); err != nil {
		t.Fatal(err)
	}
	if err := e.bk.Restart(wiped); err != nil {
		t.Fatal(err)
	}
	if !e.bk.Server(wiped).InLimbo() {
		t.Fatal("re-formatted bookie not in limbo")
	}
	e.waitBookies(3)

	w1, err := c.Create(ctx, ledger.CreateOptions{Ensemble: 3, WriteQuorum: 2, AckQuorum: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("ledger before the format: %d, after: %d", w0.ID(), w1.ID())
	for i := range 10 {
		if _, err := w1.Append(ctx, []byte(fmt.Sprintf("new-%d", i))); err != nil {
			t.Fatalf("append %d to ledger %d created after the format (ensemble of every bookie, one of them in limbo): %v", i, w1.ID(), err)
		}
	}
	md, err := c.Metadata(ctx, w1.ID())
	if err != nil {
		t.Fatal(err)
	}
	ens := md.Segments[len(md.Segments)-1].Ensemble
	if len(md.Segments) != 1 || e.index(ens[0].ID)+e.index(ens[1].ID)+e.index(ens[2].ID) != 3 {
		t.Errorf("ledger %d: segments %d, ensemble %v: want one segment on every bookie", w1.ID(), len(md.Segments), ens)
	}
	if !e.bk.Server(wiped).InLimbo() {
		t.Error("the limbo ended: the test no longer covers a bookie in limbo")
	}
}
