package autorecovery_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	bookiev1 "github.com/meridianmq/meridian/api/bookie/v1"
	"github.com/meridianmq/meridian/bookie/autorecovery"
	"github.com/meridianmq/meridian/bookie/bookietest"
	"github.com/meridianmq/meridian/bookie/ledger"
	"github.com/meridianmq/meridian/metadata"
	"github.com/meridianmq/meridian/metadata/metadatatest"
	"github.com/meridianmq/meridian/topology"
)

// Racks of the test bookies: bookie i is in racks[i%3], so rack-c holds only
// bookie-2 (of 5) and every E=3/Qw=2 ensemble must use it (three racks for
// three overlapping pairs), while the other bookies have a rack twin that
// can replace them under enforced rack-awareness.
var racks = []string{"rack-a", "rack-b", "rack-c"}

const minRacks = 2

// env is a real metadata store, real bookies registered in it, and a real
// ledger client, plus what the test wrote.
type env struct {
	t         *testing.T
	store     metadata.Store
	bk        *bookietest.Cluster
	client    *ledger.Client
	placement topology.Placement
	logger    *slog.Logger

	mu      sync.Mutex
	written map[int64][][]byte // ledger ID -> acknowledged entries
}

func newEnv(t *testing.T, n int) *env {
	t.Helper()
	store := metadatatest.Start(t)
	bk := bookietest.StartCluster(t, n, bookietest.WithMetadata(store), bookietest.WithRacks(racks...))
	return newEnvOn(t, n, store, bk, func(cfg *ledger.Config) {
		cfg.AddTimeout = 5 * time.Second
		cfg.ReadTimeout = 5 * time.Second
	})
}

// newEnvOn is newEnv on the n bookies bk, which register in store; edit,
// if not nil, changes the ledger client's config.
func newEnvOn(t *testing.T, n int, store metadata.Store, bk *bookietest.Cluster, edit func(cfg *ledger.Config)) *env {
	t.Helper()
	e := &env{t: t, store: store, bk: bk, written: map[int64][][]byte{}}
	e.logger = slog.New(slog.NewTextHandler(&tlog{t: t, on: true}, &slog.HandlerOptions{Level: slog.LevelInfo}))
	e.placement = e.newPlacement()
	cfg := ledger.DefaultConfig()
	cfg.Store = store
	cfg.Placement = e.placement
	cfg.Region = "local"
	cfg.Logger = e.logger.With("who", "ledger-client")
	if edit != nil {
		edit(&cfg)
	}
	c, err := ledger.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	e.client = c
	e.waitFor("all bookies registered", 30*time.Second, func() (bool, string) {
		res, err := store.List(context.Background(), topology.BookieRegistryPrefix, metadata.Page{}, metadata.ReadOptions{})
		return err == nil && len(res.KVs) == n, fmt.Sprintf("%d registered, err %v", len(res.KVs), err)
	})
	return e
}

func (e *env) newPlacement() topology.Placement {
	cfg := topology.DefaultRackAwareConfig()
	cfg.MinRacksPerWriteQuorum = minRacks
	cfg.Enforce = true
	pl, err := topology.NewRackAwarePlacement(cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	return pl
}

// tlog routes logs to t.Log until the test ends.
type tlog struct {
	t  *testing.T
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

func (e *env) ctx() context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	e.t.Cleanup(cancel)
	return ctx
}

func payload(id int64, i int) []byte {
	// Sizes from 0 to ~3 KiB, so empty entries are covered too.
	n := (i * 97) % 3000
	b := make([]byte, n)
	for j := range b {
		b[j] = byte(int(id)*31 + i*7 + j)
	}
	return b
}

// append adds count entries to w and records the acknowledged ones.
func (e *env) append(w *ledger.Writer, count int) {
	e.t.Helper()
	for range count {
		e.mu.Lock()
		i := len(e.written[w.ID()])
		e.mu.Unlock()
		data := payload(w.ID(), i)
		id, err := w.Append(e.ctx(), data)
		if err != nil {
			e.t.Fatalf("append to ledger %d: %v", w.ID(), err)
		}
		if id != int64(i) {
			e.t.Fatalf("ledger %d: entry %d got id %d", w.ID(), i, id)
		}
		e.mu.Lock()
		e.written[w.ID()] = append(e.written[w.ID()], data)
		e.mu.Unlock()
	}
}

// create makes a ledger with the quorums and returns its writer.
func (e *env) create(ens, qw, qa int) *ledger.Writer {
	e.t.Helper()
	w, err := e.client.Create(e.ctx(), ledger.CreateOptions{Ensemble: ens, WriteQuorum: qw, AckQuorum: qa})
	if err != nil {
		e.t.Fatalf("create E=%d Qw=%d Qa=%d: %v", ens, qw, qa, err)
	}
	e.mu.Lock()
	e.written[w.ID()] = nil
	e.mu.Unlock()
	return w
}

// closedLedgers writes and closes the standard set: four E=3/Qw=2/Qa=2 and
// three E=Qw=Qa=3 ledgers of 40 entries.
func (e *env) closedLedgers() {
	e.t.Helper()
	for i := range 7 {
		var w *ledger.Writer
		if i < 4 {
			w = e.create(3, 2, 2)
		} else {
			w = e.create(3, 3, 3)
		}
		e.append(w, 40)
		if err := w.Close(e.ctx()); err != nil {
			e.t.Fatalf("close ledger %d: %v", w.ID(), err)
		}
	}
}

func (e *env) metadataOf(id int64) *ledger.Metadata {
	e.t.Helper()
	kv, err := e.store.Get(e.ctx(), ledger.LedgerKey(id), metadata.ReadOptions{})
	if err != nil {
		e.t.Fatalf("metadata of %d: %v", id, err)
	}
	var md ledger.Metadata
	if err := json.Unmarshal(kv.Value, &md); err != nil {
		e.t.Fatal(err)
	}
	return &md
}

func uses(md *ledger.Metadata, bookieID string) bool {
	for _, s := range md.Segments {
		for _, b := range s.Ensemble {
			if b.ID == bookieID {
				return true
			}
		}
	}
	return false
}

// ledgersUsing returns the ledgers whose metadata names bookieID.
func (e *env) ledgersUsing(bookieID string) []int64 {
	e.mu.Lock()
	ids := make([]int64, 0, len(e.written))
	for id := range e.written {
		ids = append(ids, id)
	}
	e.mu.Unlock()
	var out []int64
	for _, id := range ids {
		if uses(e.metadataOf(id), bookieID) {
			out = append(out, id)
		}
	}
	return out
}

// pickVictim returns the bookie outside rack-c used by the most ledgers
// (among those allowed by only, if non-empty).
func (e *env) pickVictim(only []topology.BookieInfo) (int, []int64) {
	e.t.Helper()
	best, bestN := -1, -1
	var bestIDs []int64
	for i := range e.bk.N() {
		if racks[i%len(racks)] == "rack-c" {
			continue
		}
		if len(only) > 0 && !containsID(only, e.bk.ID(i)) {
			continue
		}
		ids := e.ledgersUsing(e.bk.ID(i))
		if len(ids) > bestN {
			best, bestN, bestIDs = i, len(ids), ids
		}
	}
	if bestN < 1 {
		e.t.Fatalf("no bookie is used by any ledger")
	}
	return best, bestIDs
}

func containsID(bs []topology.BookieInfo, id string) bool {
	for _, b := range bs {
		if b.ID == id {
			return true
		}
	}
	return false
}

func (e *env) index(id string) int {
	for i := range e.bk.N() {
		if e.bk.ID(i) == id {
			return i
		}
	}
	e.t.Fatalf("unknown bookie %s", id)
	return -1
}

// waitFor polls cond until it holds or the deadline passes.
func (e *env) waitFor(what string, d time.Duration, cond func() (bool, string)) {
	e.t.Helper()
	deadline := time.Now().Add(d)
	for {
		ok, detail := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("timed out after %v waiting for %s: %s", d, what, detail)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// holdsFor polls cond for the whole duration and fails if it ever breaks.
func (e *env) holdsFor(what string, d time.Duration, cond func() (bool, string)) {
	e.t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if ok, detail := cond(); !ok {
			e.t.Fatalf("%s stopped holding: %s", what, detail)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (e *env) marks() []autorecovery.UnderReplicatedLedger {
	r, err := autorecovery.Status(e.ctx(), e.store)
	if err != nil {
		e.t.Fatalf("status: %v", err)
	}
	return r.UnderReplicated
}

// noLedgerUses reports whether no ledger names bookieID and no mark remains.
func (e *env) repaired(bookieID string) func() (bool, string) {
	return func() (bool, string) {
		using := e.ledgersUsing(bookieID)
		marks := e.marks()
		return len(using) == 0 && len(marks) == 0, fmt.Sprintf("ledgers still using %s: %v; marks: %+v", bookieID, using, marks)
	}
}

func (e *env) startAuditor(id string, reg prometheus.Registerer) *autorecovery.Auditor {
	e.t.Helper()
	return e.startAuditorWith(id, func(cfg *autorecovery.AuditorConfig) { cfg.Registerer = reg })
}

// startAuditorWith starts an auditor with short test intervals, with tweak
// applied.
func (e *env) startAuditorWith(id string, tweak func(*autorecovery.AuditorConfig)) *autorecovery.Auditor {
	e.t.Helper()
	cfg := autorecovery.DefaultAuditorConfig()
	cfg.Store = e.store
	cfg.ID = id
	cfg.Logger = e.logger.With("who", id)
	cfg.LostBookieDelay = time.Second
	cfg.CheckInterval = 100 * time.Millisecond
	cfg.AuditInterval = time.Second
	cfg.SessionTTL = 3 * time.Second
	tweak(&cfg)
	a, err := autorecovery.NewAuditor(cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	a.Start()
	e.t.Cleanup(func() { a.Close() })
	return a
}

func (e *env) workerConfig(id string, reg prometheus.Registerer) autorecovery.WorkerConfig {
	cfg := autorecovery.DefaultWorkerConfig()
	cfg.Store = e.store
	cfg.Placement = e.placement
	cfg.ID = id
	cfg.Logger = e.logger.With("who", id)
	cfg.Registerer = reg
	cfg.PollInterval = 100 * time.Millisecond
	cfg.RetryBackoff = 500 * time.Millisecond
	cfg.SessionTTL = 3 * time.Second
	cfg.RPCTimeout = 5 * time.Second
	return cfg
}

func (e *env) startWorker(cfg autorecovery.WorkerConfig) *autorecovery.Worker {
	e.t.Helper()
	w, err := autorecovery.NewWorker(cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	w.Start()
	e.t.Cleanup(func() { w.Close() })
	return w
}

// verifyReplicas checks every ledger the test wrote: closed at its last
// acknowledged entry, no segment names a bookie in gone, every write
// quorum keeps the rack spread, and every entry is stored, intact, on EACH
// bookie of its write set (read directly from that bookie), and reads back
// through the ledger client.
func (e *env) verifyReplicas(gone ...string) {
	e.t.Helper()
	ctx := e.ctx()
	e.mu.Lock()
	written := make(map[int64][][]byte, len(e.written))
	for id, ents := range e.written {
		written[id] = ents
	}
	e.mu.Unlock()
	replicas := 0
	for id, ents := range written {
		md := e.metadataOf(id)
		if md.State != ledger.StateClosed || md.LastEntry != int64(len(ents))-1 {
			e.t.Fatalf("ledger %d: state %s last entry %d, want closed at %d", id, md.State, md.LastEntry, len(ents)-1)
		}
		for s, seg := range md.Segments {
			for _, b := range seg.Ensemble {
				for _, g := range gone {
					if b.ID == g {
						e.t.Fatalf("ledger %d segment %d still names %s", id, s, g)
					}
				}
			}
			if err := topology.CheckEnsemble(seg.Ensemble, md.WriteQuorum, minRacks); err != nil {
				e.t.Errorf("ledger %d segment %d: %v", id, s, err)
			}
		}
		for i, want := range ents {
			eid := int64(i)
			seg := md.Segments[0]
			for _, sg := range md.Segments {
				if eid >= sg.FirstEntry {
					seg = sg
				}
			}
			for k := range md.WriteQuorum {
				b := seg.Ensemble[(i+k)%md.Ensemble]
				resp, err := e.bk.Client(e.index(b.ID)).ReadEntry(ctx, &bookiev1.ReadEntryRequest{LedgerId: id, EntryId: eid})
				if err != nil {
					e.t.Fatalf("ledger %d entry %d: replica %s: %v", id, eid, b.ID, err)
				}
				if string(resp.Payload) != string(want) {
					e.t.Fatalf("ledger %d entry %d: replica %s holds %d bytes that differ from the %d written", id, eid, b.ID, len(resp.Payload), len(want))
				}
				replicas++
			}
		}
		r, err := e.client.Open(ctx, id)
		if err != nil {
			e.t.Fatalf("open %d: %v", id, err)
		}
		if len(ents) > 0 {
			got, err := r.Read(ctx, 0, int64(len(ents))-1)
			if err != nil {
				e.t.Fatalf("read %d: %v", id, err)
			}
			dups := 0
			for i, g := range got {
				if g.EntryID != int64(i) {
					dups++
				}
				if string(g.Data) != string(ents[i]) {
					e.t.Fatalf("ledger %d entry %d reads back wrong", id, i)
				}
			}
			e.t.Logf("ledger %d: %d entries read back, %d duplicates/out-of-order", id, len(got), dups)
		}
		r.Close()
	}
	e.t.Logf("verified %d ledgers, %d entry replicas", len(written), replicas)
}

func counterValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		var sum float64
		for _, m := range mf.GetMetric() {
			sum += metricValue(m)
		}
		return sum
	}
	return -1
}

func metricValue(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	}
	return 0
}
