package ledger_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/meridianmq/meridian/bookie/ledger"
	"github.com/meridianmq/meridian/metadata"
	"github.com/meridianmq/meridian/topology"
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

// TestSpeculativeReadAroundSlowReplica points one ensemble member of a
// closed ledger at a listener that accepts connections and never answers
// (a hung bookie): reads must complete from the other replicas long before
// ReadTimeout, through speculative reads.
func TestSpeculativeReadAroundSlowReplica(t *testing.T) {
	e := newEnv(t, 3)
	reg := prometheus.NewRegistry()
	c := e.client(func(c *ledger.Config) {
		c.SpeculativeReadDelay = 20 * time.Millisecond
		c.ReadTimeout = 20 * time.Second
		c.Registerer = reg
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	w, err := c.Create(ctx, ledger.CreateOptions{Ensemble: 3, WriteQuorum: 3, AckQuorum: 2})
	if err != nil {
		t.Fatal(err)
	}
	a := newAckLog()
	for i := range 30 {
		p := fmt.Sprintf("e%d", i)
		id, err := w.Append(ctx, []byte(p))
		a.record(id, p, err)
	}
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}

	// A black hole: accepts TCP connections, never speaks HTTP/2.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var held []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, conn)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range held {
			c.Close()
		}
	})
	kv, err := e.store.Get(ctx, ledger.LedgerKey(w.ID()), metadata.ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var md ledger.Metadata
	if err := json.Unmarshal(kv.Value, &md); err != nil {
		t.Fatal(err)
	}
	md.Segments[0].Ensemble[0] = topology.BookieInfo{ID: "hung-bookie", Address: ln.Addr().String(), Rack: "rack-x"}
	val, _ := json.Marshal(&md)
	if _, err := e.store.Put(ctx, ledger.LedgerKey(w.ID()), val, kv.Version, 0); err != nil {
		t.Fatal(err)
	}

	r, err := c.Open(ctx, w.ID())
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	verify(t, r, a)
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("reads took %v with one hung replica: no speculation", d)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	spec := 0.0
	for _, mf := range mfs {
		if mf.GetName() == "meridian_ledger_speculative_reads_total" {
			spec = mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	if spec == 0 {
		t.Fatal("no speculative read counted")
	}
	t.Logf("read 30 entries in %v with one hung replica, %v speculative reads", time.Since(start), spec)
}

// TestManyWritersShareConnections runs several ledgers at once over the
// same per-bookie connections and kills a bookie under all of them.
func TestManyWritersShareConnections(t *testing.T) {
	e := newEnv(t, 5)
	c := e.client(nil)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	const n = 6
	var (
		ws    [n]*ledger.Writer
		logs  [n]*ackLog
		dones [n]<-chan struct{}
	)
	stop := make(chan struct{})
	for i := range n {
		w, err := c.Create(ctx, ledger.CreateOptions{Ensemble: 3, WriteQuorum: 2, AckQuorum: 2})
		if err != nil {
			t.Fatal(err)
		}
		ws[i], logs[i] = w, newAckLog()
		dones[i] = appender(w, fmt.Sprintf("l%d", i), logs[i], stop, 100)
	}
	total := func() int {
		s := 0
		for _, l := range logs {
			s += l.count()
		}
		return s
	}
	waitFor(t, 30*time.Second, "600 acks", func() bool { return total() >= 600 })
	e.bk.Kill(2)
	before := total()
	waitFor(t, 60*time.Second, "600 more acks", func() bool { return total() >= before+600 })
	close(stop)
	for i := range n {
		<-dones[i]
		if len(logs[i].errs) > 0 {
			t.Fatalf("writer %d failed: %v", i, logs[i].errs[0])
		}
		if err := ws[i].Close(ctx); err != nil {
			t.Fatal(err)
		}
		r, err := c.Open(ctx, ws[i].ID())
		if err != nil {
			t.Fatal(err)
		}
		md := r.Metadata()
		for _, b := range md.Segments[0].Ensemble {
			if b.ID == e.bk.ID(2) && len(md.Segments) < 2 {
				t.Errorf("ledger %d had the killed bookie and no ensemble change", md.ID)
			}
		}
		for _, b := range md.Segments[len(md.Segments)-1].Ensemble {
			if b.ID == e.bk.ID(2) {
				t.Errorf("ledger %d still writes to the killed bookie", md.ID)
			}
		}
		verify(t, r, logs[i])
	}
}
