package ledger_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	bookiev1 "github.com/meridianmq/meridian/api/bookie/v1"
	"github.com/meridianmq/meridian/bookie/ledger"
	"github.com/meridianmq/meridian/metadata"
	"github.com/meridianmq/meridian/topology"
)

// TestNoEnsembleChangeAroundFence: a bookie of the ensemble is fenced (a
// recovery is under way) but the writer's next entry does not go to it;
// another member of that entry's write set dies. The writer must fail with
// ErrLedgerFenced instead of replacing the dead bookie and carrying on.
func TestNoEnsembleChangeAroundFence(t *testing.T) {
	e := newEnv(t, 4)
	c := e.client(nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	w, err := c.Create(ctx, ledger.CreateOptions{Ensemble: 3, WriteQuorum: 2, AckQuorum: 2})
	if err != nil {
		t.Fatal(err)
	}
	a := newAckLog()
	for i := range 3 { // entry 3 goes to ensemble positions 0 and 1
		p := fmt.Sprintf("e%d", i)
		id, err := w.Append(ctx, []byte(p))
		a.record(id, p, err)
		if err != nil {
			t.Fatal(err)
		}
	}
	md, err := c.Metadata(ctx, w.ID())
	if err != nil {
		t.Fatal(err)
	}
	ens := md.Segments[0].Ensemble
	if _, err := e.bk.Client(e.index(ens[2].ID)).Fence(ctx, &bookiev1.FenceRequest{LedgerId: w.ID()}); err != nil {
		t.Fatal(err)
	}
	e.bk.Kill(e.index(ens[0].ID))
	if _, err := w.Append(ctx, []byte("zombie")); !errors.Is(err, ledger.ErrLedgerFenced) {
		t.Fatalf("append with a fenced ensemble member and a dead one: %v, want ErrLedgerFenced", err)
	}
	md, err = c.Metadata(ctx, w.ID())
	if err != nil {
		t.Fatal(err)
	}
	if len(md.Segments) != 1 || bookieIDsOf(md.Segments[0].Ensemble) != bookieIDsOf(ens) {
		t.Fatalf("ensemble changed around a fence: %+v", md.Segments)
	}
	// Nothing acknowledged is lost: once the dead bookie is back (recovery
	// re-adds each entry to Qa bookies of its write set), recovery finds
	// entries 0..2.
	if err := e.bk.Restart(e.index(ens[0].ID)); err != nil {
		t.Fatal(err)
	}
	var r *ledger.Reader
	waitFor(t, 30*time.Second, "recovery", func() bool {
		r, err = c.OpenRecover(ctx, w.ID())
		if err != nil && !errors.Is(err, ledger.ErrLedgerRecovering) {
			t.Fatalf("recovery: %v", err)
		}
		return err == nil
	})
	verify(t, r, a)
}

func bookieIDsOf(ens []topology.BookieInfo) string {
	s := ""
	for _, b := range ens {
		s += b.ID + ","
	}
	return s
}

// TestBusyBookieRetriedNotReplaced: a bookie answering RESOURCE_EXHAUSTED
// "too many in flight" (back-pressure) is retried after a backoff, never
// replaced. The answers are injected by a client interceptor on that
// bookie's connection (the real bookie stored the entry; resending it is
// harmless). With Qa = Qw = E = 3 no entry can complete without it.
func TestBusyBookieRetriedNotReplaced(t *testing.T) {
	e := newEnv(t, 4)
	const inject = 60
	var injected atomic.Int64
	var busyAddr atomic.Value
	busyAddr.Store("")
	intercept := func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string,
		streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		cs, err := streamer(ctx, desc, cc, method, opts...)
		if err != nil || method != bookiev1.Bookie_AddEntries_FullMethodName || cc.Target() != busyAddr.Load().(string) {
			return cs, err
		}
		return &busyStream{ClientStream: cs, injected: &injected, limit: inject}, nil
	}
	c := e.client(func(cfg *ledger.Config) {
		cfg.DialOptions = append(cfg.DialOptions, grpc.WithChainStreamInterceptor(intercept))
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	w, err := c.Create(ctx, ledger.CreateOptions{Ensemble: 3, WriteQuorum: 3, AckQuorum: 3})
	if err != nil {
		t.Fatal(err)
	}
	md, err := c.Metadata(ctx, w.ID())
	if err != nil {
		t.Fatal(err)
	}
	ens := md.Segments[0].Ensemble
	busy := e.index(ens[1].ID)
	busyAddr.Store(e.bk.Addr(busy))

	a := newAckLog()
	const n = 200
	var wg sync.WaitGroup
	wg.Add(n)
	for i := range n {
		p := fmt.Sprintf("entry-%d", i)
		w.AppendAsync([]byte(p), func(id int64, err error) {
			a.record(id, p, err)
			wg.Done()
		})
	}
	wg.Wait()
	if len(a.errs) > 0 {
		t.Fatalf("adds failed under back-pressure: %v", a.errs[0])
	}
	if got := injected.Load(); got != inject {
		t.Fatalf("injected %d busy answers, want %d", got, inject)
	}
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	md, err = c.Metadata(ctx, w.ID())
	if err != nil {
		t.Fatal(err)
	}
	if len(md.Segments) != 1 || bookieIDsOf(md.Segments[0].Ensemble) != bookieIDsOf(ens) {
		t.Fatalf("busy bookie was replaced: %+v", md.Segments)
	}
	for id := range int64(n) {
		if _, err := e.bk.Client(busy).ReadEntry(ctx, &bookiev1.ReadEntryRequest{LedgerId: w.ID(), EntryId: id}); err != nil {
			t.Fatalf("entry %d missing on the busy bookie: %v", id, err)
		}
	}
	r, err := c.Open(ctx, w.ID())
	if err != nil {
		t.Fatal(err)
	}
	verify(t, r, a)
}

// busyStream turns the first limit successful add results it receives
// into RESOURCE_EXHAUSTED "too many in flight".
type busyStream struct {
	grpc.ClientStream
	injected *atomic.Int64
	limit    int64
}

func (s *busyStream) RecvMsg(m any) error {
	if err := s.ClientStream.RecvMsg(m); err != nil {
		return err
	}
	for _, r := range m.(*bookiev1.AddEntriesResponse).Results {
		if r.Code != int32(codes.OK) {
			continue
		}
		for {
			n := s.injected.Load()
			if n >= s.limit {
				break
			}
			if s.injected.CompareAndSwap(n, n+1) {
				r.Code = int32(codes.ResourceExhausted)
				r.Message = "too many in flight: injected by test"
				break
			}
		}
	}
	return nil
}

// TestDeleteFollowsConcurrentSwap: while Client.Delete runs, an
// autorecovery-style swap copies the ledger to a spare bookie and records
// it in the metadata. Delete must notice (version mismatch), delete on the
// spare too, and only then remove the metadata: no replica is orphaned.
func TestDeleteFollowsConcurrentSwap(t *testing.T) {
	e := newEnv(t, 4)
	var (
		swapOnce sync.Once
		swapErr  error
		swap     func(ctx context.Context) error
		swapMu   sync.Mutex
	)
	intercept := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn,
		invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if method == bookiev1.Bookie_DeleteLedger_FullMethodName {
			swapMu.Lock()
			f := swap
			swapMu.Unlock()
			if f != nil {
				swapOnce.Do(func() { swapErr = f(ctx) })
			}
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	c := e.client(func(cfg *ledger.Config) {
		cfg.DialOptions = append(cfg.DialOptions, grpc.WithChainUnaryInterceptor(intercept))
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	w, err := c.Create(ctx, ledger.CreateOptions{Ensemble: 3, WriteQuorum: 3, AckQuorum: 2})
	if err != nil {
		t.Fatal(err)
	}
	const n = 20
	for i := range n {
		if _, err := w.Append(ctx, []byte(fmt.Sprintf("e%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	md, err := c.Metadata(ctx, w.ID())
	if err != nil {
		t.Fatal(err)
	}
	spare := -1
	for i := range e.bk.N() {
		in := false
		for _, b := range md.Segments[0].Ensemble {
			in = in || b.ID == e.bk.ID(i)
		}
		if !in {
			spare = i
		}
	}
	swapMu.Lock()
	swap = func(ctx context.Context) error {
		for id := range int64(n) {
			if _, err := e.bk.Client(spare).AddEntry(ctx, &bookiev1.AddEntryRequest{LedgerId: w.ID(), EntryId: id,
				Payload: []byte(fmt.Sprintf("e%d", id)), LastAddConfirmed: -1, RecoveryAdd: true}); err != nil {
				return err
			}
		}
		kv, err := e.store.Get(ctx, ledger.LedgerKey(w.ID()), metadata.ReadOptions{})
		if err != nil {
			return err
		}
		var m ledger.Metadata
		if err := json.Unmarshal(kv.Value, &m); err != nil {
			return err
		}
		m.Segments[0].Ensemble[0] = e.bk.Info(spare)
		v, err := json.Marshal(&m)
		if err != nil {
			return err
		}
		_, err = e.store.Put(ctx, kv.Key, v, kv.Version, 0)
		return err
	}
	swapMu.Unlock()

	if err := c.Delete(ctx, w.ID()); err != nil {
		t.Fatal(err)
	}
	if swapErr != nil {
		t.Fatalf("swap: %v", swapErr)
	}
	if _, err := c.Metadata(ctx, w.ID()); !errors.Is(err, ledger.ErrNoSuchLedger) {
		t.Fatalf("metadata after delete: %v, want ErrNoSuchLedger", err)
	}
	for i := range e.bk.N() {
		_, err := e.bk.Client(i).ReadEntry(ctx, &bookiev1.ReadEntryRequest{LedgerId: w.ID(), EntryId: 0})
		if status.Code(err) != codes.NotFound {
			t.Fatalf("bookie %s still has the deleted ledger (read: %v)", e.bk.ID(i), err)
		}
	}
}
