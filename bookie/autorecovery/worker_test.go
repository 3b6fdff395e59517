package autorecovery_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/meridianmq/meridian/bookie/autorecovery"
	"github.com/meridianmq/meridian/bookie/ledger"
	"github.com/meridianmq/meridian/metadata"
)

// TestWorkerRestartMidCopy: a worker that stops in the middle of a copy
// (its adds to the replacement hang) leaves the mark and the metadata as
// they were; a fresh worker then completes the repair from scratch.
func TestWorkerRestartMidCopy(t *testing.T) {
	e := newEnv(t, 5)
	for range 2 {
		w := e.create(3, 3, 3) // every entry is on every ensemble member
		e.append(w, 60)
		if err := w.Close(e.ctx()); err != nil {
			t.Fatal(err)
		}
	}
	victim, affected := e.pickVictim(nil)
	victimID := e.bk.ID(victim)
	versions := map[int64]int64{}
	for _, id := range affected {
		kv, err := e.store.Get(e.ctx(), ledger.LedgerKey(id), metadata.ReadOptions{})
		if err != nil {
			t.Fatal(err)
		}
		versions[id] = kv.Version
	}
	e.startAuditor("auditor", nil)
	e.bk.Stop(victim)
	e.waitFor("affected ledgers marked", 20*time.Second, func() (bool, string) {
		m := e.marks()
		return len(m) == len(affected), fmt.Sprintf("marks %+v", m)
	})

	// Worker A: after 15 adds, every add hangs until the worker stops.
	var adds atomic.Int64
	hang := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if method == "/meridian.bookie.v1.Bookie/AddEntry" && adds.Add(1) > 15 {
			<-ctx.Done()
			return ctx.Err()
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	cfgA := e.workerConfig("worker-a", prometheus.NewRegistry())
	cfgA.CopyConcurrency = 1
	cfgA.RPCTimeout = time.Minute
	cfgA.DialOptions = []grpc.DialOption{grpc.WithUnaryInterceptor(hang)}
	a, err := autorecovery.NewWorker(cfgA)
	if err != nil {
		t.Fatal(err)
	}
	a.Start()
	e.waitFor("worker A stuck mid-copy", 20*time.Second, func() (bool, string) {
		return adds.Load() > 15, fmt.Sprintf("%d adds", adds.Load())
	})
	st, err := autorecovery.Status(e.ctx(), e.store)
	if err != nil {
		t.Fatal(err)
	}
	locked := 0
	for _, m := range st.UnderReplicated {
		if m.Worker == "worker-a" {
			locked++
		}
	}
	if locked != 1 {
		t.Errorf("status shows %d ledgers locked by worker-a, want 1: %+v", locked, st.UnderReplicated)
	}
	closed := make(chan struct{})
	go func() { a.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(20 * time.Second):
		t.Fatal("Close of a worker stuck in a copy did not return")
	}
	// Nothing was swapped: the copy never completed.
	for _, id := range affected {
		kv, err := e.store.Get(e.ctx(), ledger.LedgerKey(id), metadata.ReadOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if kv.Version != versions[id] {
			t.Fatalf("ledger %d metadata changed (version %d -> %d) by a worker that never finished a copy", id, versions[id], kv.Version)
		}
	}
	if m := e.marks(); len(m) != len(affected) {
		t.Fatalf("marks after the stuck worker stopped: %+v, want %d", m, len(affected))
	}

	e.startWorker(e.workerConfig("worker-b", prometheus.NewRegistry()))
	e.waitFor("every ledger repaired", 45*time.Second, e.repaired(victimID))
	e.verifyReplicas(victimID)
}

// TestWorkerDropsStaleMarks: marks that need no copy (ledger deleted,
// ledger not closed, bookie not in the ensemble, bookie back in the
// registry) are removed without touching ledger metadata.
func TestWorkerDropsStaleMarks(t *testing.T) {
	e := newEnv(t, 4)
	closed := e.create(3, 2, 2)
	e.append(closed, 10)
	if err := closed.Close(e.ctx()); err != nil {
		t.Fatal(err)
	}
	open := e.create(3, 2, 2)
	e.append(open, 5)
	member := e.metadataOf(closed.ID()).Segments[0].Ensemble[0].ID

	put := func(id int64, missing ...string) {
		val, _ := json.Marshal(autorecovery.Mark{LedgerID: id, Missing: missing, MarkedUnixMs: time.Now().UnixMilli()})
		if _, err := e.store.Put(e.ctx(), autorecovery.UnderReplicatedKey(id), val, metadata.AnyVersion, 0); err != nil {
			t.Fatal(err)
		}
	}
	put(closed.ID(), "bookie-nowhere", member) // member is live: it still holds its data
	put(open.ID(), e.metadataOf(open.ID()).Segments[0].Ensemble[0].ID)
	put(987654321, "bookie-0") // no such ledger
	before := map[int64]int64{}
	for _, id := range []int64{closed.ID(), open.ID()} {
		kv, err := e.store.Get(e.ctx(), ledger.LedgerKey(id), metadata.ReadOptions{})
		if err != nil {
			t.Fatal(err)
		}
		before[id] = kv.Version
	}
	reg := prometheus.NewRegistry()
	e.startWorker(e.workerConfig("worker", reg))
	e.waitFor("stale marks dropped", 20*time.Second, func() (bool, string) {
		m := e.marks()
		return len(m) == 0, fmt.Sprintf("marks %+v", m)
	})
	for id, v := range before {
		kv, err := e.store.Get(e.ctx(), ledger.LedgerKey(id), metadata.ReadOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if kv.Version != v {
			t.Errorf("ledger %d metadata changed for a stale mark", id)
		}
	}
	if got := counterValue(t, reg, "meridian_autorecovery_rereplicated_entries_total"); got != 0 {
		t.Errorf("copied %v entries for stale marks", got)
	}
	e.append(open, 5) // the writer is unaffected
	if err := open.Close(e.ctx()); err != nil {
		t.Fatal(err)
	}
	e.verifyReplicas()
}
