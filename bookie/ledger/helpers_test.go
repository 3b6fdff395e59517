package ledger_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/meridianmq/meridian/bookie/bookietest"
	"github.com/meridianmq/meridian/bookie/ledger"
	"github.com/meridianmq/meridian/metadata"
	"github.com/meridianmq/meridian/metadata/metadatatest"
	"github.com/meridianmq/meridian/topology"
)

// env is a real metadata store plus n real bookies registered in it.
type env struct {
	t     testing.TB
	store metadata.Store
	bk    *bookietest.Cluster
}

func newEnv(t testing.TB, n int, opts ...bookietest.Option) *env {
	t.Helper()
	store := metadatatest.Start(t)
	bk := bookietest.StartCluster(t, n, append([]bookietest.Option{bookietest.WithMetadata(store)}, opts...)...)
	e := &env{t: t, store: store, bk: bk}
	e.waitBookies(n)
	return e
}

// waitBookies polls the registry until n writable bookies are registered.
func (e *env) waitBookies(n int) {
	e.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		res, err := e.store.List(context.Background(), topology.BookieRegistryPrefix, metadata.Page{}, metadata.ReadOptions{})
		if err == nil && len(res.KVs) >= n {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("only %d bookies registered after 30s (err %v)", len(res.KVs), err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

type tlog struct {
	t  testing.TB
	mu sync.Mutex
	on bool
}

func (w *tlog) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.on {
		w.t.Log(string(p))
	}
	return len(p), nil
}

func (e *env) client(tweak func(*ledger.Config)) *ledger.Client {
	e.t.Helper()
	pl, err := topology.NewRackAwarePlacement(topology.DefaultRackAwareConfig())
	if err != nil {
		e.t.Fatal(err)
	}
	lw := &tlog{t: e.t, on: true}
	e.t.Cleanup(func() { lw.mu.Lock(); lw.on = false; lw.mu.Unlock() })
	cfg := ledger.DefaultConfig()
	cfg.Store = e.store
	cfg.Placement = pl
	cfg.Region = "test"
	cfg.Logger = slog.New(slog.NewTextHandler(lw, &slog.HandlerOptions{Level: slog.LevelInfo}))
	cfg.Registerer = prometheus.NewRegistry()
	cfg.AddTimeout = 5 * time.Second
	cfg.ReadTimeout = 5 * time.Second
	if tweak != nil {
		tweak(&cfg)
	}
	c, err := ledger.NewClient(cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { c.Close() })
	return c
}

// index returns the bookietest index of bookie id.
func (e *env) index(id string) int {
	for i := range e.bk.N() {
		if e.bk.ID(i) == id {
			return i
		}
	}
	e.t.Fatalf("unknown bookie %s", id)
	return -1
}

// ackLog records what writers were told was added.
type ackLog struct {
	mu    sync.Mutex
	acked map[int64]string // entry ID -> payload
	max   int64
	errs  []error
}

func newAckLog() *ackLog { return &ackLog{acked: map[int64]string{}, max: -1} }

func (a *ackLog) record(id int64, payload string, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if err != nil {
		a.errs = append(a.errs, err)
		return
	}
	a.acked[id] = payload
	a.max = max(a.max, id)
}

func (a *ackLog) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.acked)
}

func (a *ackLog) last() int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.max
}

// verify reads the whole ledger through r and asserts every acknowledged
// entry is there with its payload; it logs duplicated payloads.
func verify(t testing.TB, r *ledger.Reader, a *ackLog) {
	t.Helper()
	a.mu.Lock()
	defer a.mu.Unlock()
	lac := r.LastAddConfirmed()
	if a.max > lac {
		t.Fatalf("LOST: last acknowledged entry %d is beyond the readable end %d", a.max, lac)
	}
	if lac < 0 {
		if len(a.acked) > 0 {
			t.Fatalf("LOST: %d acknowledged entries, ledger empty", len(a.acked))
		}
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var entries []ledger.Entry
	for first := int64(0); first <= lac; first += 10000 {
		got, err := r.Read(ctx, first, min(first+9999, lac))
		if err != nil {
			t.Fatalf("read %d..%d: %v", first, min(first+9999, lac), err)
		}
		entries = append(entries, got...)
	}
	seen := map[string]int{}
	for i, en := range entries {
		if en.EntryID != int64(i) {
			t.Fatalf("entry %d came back as %d", i, en.EntryID)
		}
		seen[string(en.Data)]++
	}
	lost := 0
	for id, p := range a.acked {
		if got := string(entries[id].Data); got != p {
			lost++
			t.Errorf("LOST: acknowledged entry %d = %q, read %q", id, p, got)
		}
	}
	dups := 0
	for p, n := range seen {
		if n > 1 {
			dups += n - 1
			t.Logf("duplicate payload %q appears %d times", p, n)
		}
	}
	t.Logf("verified: %d acknowledged entries, ledger holds %d entries (0..%d), %d lost, %d duplicates",
		len(a.acked), len(entries), lac, lost, dups)
}

// appender appends payloads "<tag>-<n>" asynchronously until stop is closed
// or the writer fails, recording every callback. It paces itself (at most
// ~5000 adds/s) so a slow failure injection does not pile up entries.
func appender(w *ledger.Writer, tag string, a *ackLog, stop <-chan struct{}, size int) (done <-chan struct{}) {
	ch := make(chan struct{})
	go func() {
		defer close(ch)
		var wg sync.WaitGroup
		var mu sync.Mutex
		failed := false
		lastCB := int64(-1)
		for n := 0; ; n++ {
			select {
			case <-stop:
				wg.Wait()
				return
			default:
			}
			mu.Lock()
			f := failed
			mu.Unlock()
			if f {
				wg.Wait()
				return
			}
			p := fmt.Sprintf("%s-%d", tag, n)
			data := []byte(p)
			if len(data) < size {
				data = append(data, make([]byte, size-len(data))...)
				p = string(data)
			}
			if n%10 == 9 {
				time.Sleep(2 * time.Millisecond)
			}
			wg.Add(1)
			w.AppendAsync(data, func(id int64, err error) {
				defer wg.Done()
				mu.Lock()
				if err == nil && id <= lastCB {
					panic(fmt.Sprintf("callback out of order: %d after %d", id, lastCB))
				}
				if err == nil {
					lastCB = id
				} else {
					failed = true
				}
				mu.Unlock()
				a.record(id, p, err)
			})
		}
	}()
	return ch
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
