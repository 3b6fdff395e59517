package bookie_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	bookiev1 "github.com/meridianmq/meridian/api/bookie/v1"
	"github.com/meridianmq/meridian/bookie"
	"github.com/meridianmq/meridian/bookie/bookietest"
	"github.com/meridianmq/meridian/internal/budget"
	"github.com/meridianmq/meridian/internal/faultfs"
	"google.golang.org/grpc/codes"
)

// stallFS wraps a file system so that journal fsyncs (files named *.log)
// block while it is stalled.
type stallFS struct {
	faultfs.FS
	mu      sync.Mutex
	gate    chan struct{} // nil = not stalled; closed to lift
	blocked atomic.Int32  // fsyncs waiting on the gate
}

func (s *stallFS) stall() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gate = make(chan struct{})
}

func (s *stallFS) lift() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gate != nil {
		close(s.gate)
		s.gate = nil
	}
}

func (s *stallFS) Create(name string) (faultfs.File, error) {
	f, err := s.FS.Create(name)
	if err != nil {
		return nil, err
	}
	return &stallFile{File: f, fs: s}, nil
}

type stallFile struct {
	faultfs.File
	fs *stallFS
}

func (f *stallFile) Sync() error {
	if strings.HasSuffix(f.Name(), ".log") {
		f.fs.mu.Lock()
		gate := f.fs.gate
		f.fs.mu.Unlock()
		if gate != nil {
			f.fs.blocked.Add(1)
			<-gate
			f.fs.blocked.Add(-1)
		}
	}
	return f.File.Sync()
}

// startStalled starts one bookie whose journal fsyncs stall on sfs.
func startStalled(t *testing.T, tweak func(cfg *bookie.Config)) (*bookietest.Cluster, *stallFS) {
	sfs := &stallFS{}
	c := bookietest.StartCluster(t, 1, bookietest.WithConfig(func(i int, cfg *bookie.Config) {
		sfs.FS = cfg.Testing.FS
		cfg.Testing.FS = sfs
		cfg.CheckpointInterval = time.Hour
		cfg.GCInterval = 0
		tweak(cfg)
	}))
	t.Cleanup(sfs.lift) // before the cluster stops (cleanups run last first)
	return c, sfs
}

// With the journal's fsync stalled, 4 MiB adds fill max_queued_add_bytes
// and the rest wait: the queued bytes never exceed the limit, an add whose
// context ends is refused naming the limit and is not stored, and once the
// fsync goes on every add is acknowledged and readable, each once.
func TestJournalQueueBoundedInBytes(t *testing.T) {
	const (
		size   = 4 << 20
		n      = 12
		record = size + 40 // record header
		limit  = 4*record + 100
	)
	c, sfs := startStalled(t, func(cfg *bookie.Config) { cfg.MaxQueuedAddBytes = limit })
	srv, cl := c.Server(0), c.Client(0)
	ctx := ctxT(t)
	const ledger = 7
	sfs.stall()

	errs := make([]error, n)
	var wg sync.WaitGroup
	for e := range int64(n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[e] = add(ctx, cl, ledger, e, payloadFor(ledger, e, size))
		}()
	}
	// Poll until the fsync is stalled with the queue full and adds
	// waiting; the queued bytes (exact peak and the gauge) stay within
	// the limit all along.
	deadline := time.Now().Add(30 * time.Second)
	for {
		inUse, peak, waiting := srv.QueuedAddBytesForTest()
		g := metricValue(t, srv, "meridian_bookie_journal_queued_add_bytes")
		if peak > limit || g > limit {
			t.Fatalf("queued bytes peaked at %d (gauge %v), limit max_queued_add_bytes=%d", peak, g, limit)
		}
		if inUse == 4*record && waiting == n-4 && sfs.blocked.Load() > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("queue never filled: %d bytes queued, peak %d, %d waiting, %d fsyncs blocked", inUse, peak, waiting, sfs.blocked.Load())
		}
		time.Sleep(5 * time.Millisecond)
	}
	// An add whose context ends while it waits is refused, naming the
	// limit, and changes nothing.
	sctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	err := srv.AddForTest(sctx, &bookiev1.AddEntryRequest{LedgerId: ledger, EntryId: 1000, Payload: payloadFor(ledger, 1000, size), LastAddConfirmed: -1})
	cancel()
	if !errors.Is(err, bookie.ErrTooManyInFlight) || !strings.Contains(err.Error(), fmt.Sprintf("max_queued_add_bytes=%d", limit)) {
		t.Fatalf("refused add: %v, want ErrTooManyInFlight naming max_queued_add_bytes=%d", err, limit)
	}
	if code, _ := bookie.ToStatus(err); code != codes.ResourceExhausted {
		t.Fatalf("refused add has code %v, want ResourceExhausted", code)
	}
	t.Logf("refused: %v", err)

	sfs.lift()
	wg.Wait()
	for e, err := range errs {
		if err != nil {
			t.Fatalf("add %d: %v", e, err)
		}
	}
	if inUse, peak, _ := srv.QueuedAddBytesForTest(); inUse != 0 || peak > limit {
		t.Fatalf("after the stall: %d bytes queued, peak %d (limit %d)", inUse, peak, limit)
	}
	if g := metricValue(t, srv, "meridian_bookie_journal_queued_add_bytes"); g != 0 {
		t.Fatalf("gauge %v after every add was answered", g)
	}
	// Every acknowledged add is readable; the refused one is absent and
	// the ledger holds exactly the n entries (no duplicate, no extra).
	for e := range int64(n) {
		p, err := read(ctx, cl, ledger, e)
		if err != nil || !bytes.Equal(p, payloadFor(ledger, e, size)) {
			t.Fatalf("entry %d: read %d bytes, %v", e, len(p), err)
		}
	}
	info, err := cl.ReadLastAddConfirmed(ctx, &bookiev1.ReadLastAddConfirmedRequest{LedgerId: ledger})
	if err != nil || info.LastEntryId != n-1 {
		t.Fatalf("ledger's last entry %v, %v; want %d", info.GetLastEntryId(), err, n-1)
	}
	if _, err := read(ctx, cl, ledger, 1000); !errors.Is(err, bookie.ErrNoSuchEntry) {
		t.Fatalf("refused add 1000: read %v, want ErrNoSuchEntry", err)
	}
	_, peak, _ := srv.QueuedAddBytesForTest()
	t.Logf("%d adds of %d bytes acknowledged and read back, 0 duplicates; queued bytes peak %d of %d", n, size, peak, limit)
}

// A client that sends 1 MiB adds on one AddEntries stream and reads no
// answers (the fsync stalled, so none could come anyway) makes the bookie
// stop reading its stream once max_inflight_add_bytes_per_stream is held.
func TestAddStreamBoundedInBytes(t *testing.T) {
	const (
		size  = 1 << 20
		n     = 20
		limit = 4 * size
	)
	var mu sync.Mutex
	var budgets []*budget.Budget
	bookie.SetStreamBudgetHookForTest(func(b *budget.Budget) {
		mu.Lock()
		defer mu.Unlock()
		budgets = append(budgets, b)
	})
	t.Cleanup(func() { bookie.SetStreamBudgetHookForTest(nil) })
	c, sfs := startStalled(t, func(cfg *bookie.Config) { cfg.MaxInflightAddBytesPerStream = limit })
	srv, cl := c.Server(0), c.Client(0)
	ctx := ctxT(t)
	const ledger = 9
	sfs.stall()

	st, err := cl.AddEntries(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sendErr := make(chan error, 1)
	go func() {
		for e := range int64(n) {
			if err := st.Send(&bookiev1.AddEntriesRequest{Entries: []*bookiev1.AddEntryRequest{{LedgerId: ledger, EntryId: e, Payload: payloadFor(ledger, e, size), LastAddConfirmed: e - 1}}}); err != nil {
				sendErr <- err
				return
			}
		}
		sendErr <- st.CloseSend()
	}()
	stream := func() *budget.Budget {
		mu.Lock()
		defer mu.Unlock()
		if len(budgets) != 1 {
			return nil
		}
		return budgets[0]
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		b := stream()
		g := metricValue(t, srv, "meridian_bookie_add_stream_inflight_bytes")
		if b != nil && (b.Peak() > limit || g > limit) {
			t.Fatalf("the stream held %d bytes at most (gauge %v), limit max_inflight_add_bytes_per_stream=%d", b.Peak(), g, limit)
		}
		// Four adds held, the fifth read and waiting: the stream is no
		// longer read.
		if b != nil && b.InUse() == limit && b.Waiting() == 1 {
			break
		}
		if time.Now().After(deadline) {
			if b == nil {
				t.Fatal("no stream budget")
			}
			t.Fatalf("stream never stopped: %d held, peak %d, %d waiting", b.InUse(), b.Peak(), b.Waiting())
		}
		time.Sleep(5 * time.Millisecond)
	}
	if inUse, _, _ := srv.QueuedAddBytesForTest(); inUse != 4*(size+40) {
		t.Fatalf("%d bytes queued for the journal, want the 4 held adds' %d", inUse, 4*(size+40))
	}

	sfs.lift()
	acked := map[int64]int{}
	for len(acked) < n {
		m, err := st.Recv()
		if err != nil {
			t.Fatalf("recv after %d answers: %v", len(acked), err)
		}
		for _, r := range m.Results {
			if e := bookie.FromCode(codes.Code(r.Code), r.Message); e != nil {
				t.Fatalf("add %d: %v", r.EntryId, e)
			}
			acked[r.EntryId]++
		}
	}
	if err := <-sendErr; err != nil {
		t.Fatal(err)
	}
	for e, k := range acked {
		if k != 1 {
			t.Fatalf("entry %d answered %d times", e, k)
		}
		p, err := read(ctx, cl, ledger, e)
		if err != nil || !bytes.Equal(p, payloadFor(ledger, e, size)) {
			t.Fatalf("entry %d: read %d bytes, %v", e, len(p), err)
		}
	}
	t.Logf("%d adds of %d bytes answered and read back; the stream held %d bytes at most (limit %d)", n, size, stream().Peak(), limit)
}
