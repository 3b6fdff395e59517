package bookie_test

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"os"
	"sync"
	"testing"

	bookiev1 "github.com/meridianmq/meridian/api/bookie/v1"
	"github.com/meridianmq/meridian/bookie"
	"github.com/meridianmq/meridian/bookie/bookietest"
)

type modelLedger struct {
	fenced  bool
	entries map[int64][]byte
}

// TestRandomOpsAgainstModel drives one bookie with random adds, recovery
// adds, fences, deletes, reads, checkpoints, GCs, crashes and restarts and
// checks every answer against a simple in-memory model — while a
// concurrent writer keeps adding to its own ledger, racing compaction.
func TestRandomOpsAgainstModel(t *testing.T) {
	seeds, steps := []uint64{1, 2, 3}, 400
	if os.Getenv("MERIDIAN_LONG") != "" {
		seeds, steps = []uint64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 3000
	}
	for _, seed := range seeds {
		t.Run("", func(t *testing.T) { runModel(t, seed, steps) })
	}
}

func runModel(t *testing.T, seed uint64, steps int) {
	rng := rand.New(rand.NewPCG(seed, seed))
	c := bookietest.StartCluster(t, 1, bookietest.WithConfig(func(i int, cfg *bookie.Config) {
		cfg.MaxJournalFileBytes = 1 << 20
		cfg.CompactionThreshold = 0.9
		cfg.GCInterval = 0
	}))
	ctx := ctxT(t)
	model := map[int64]*modelLedger{}
	cl := c.Client(0)
	var gcTotal bookie.GCStats

	// The concurrent writer: its acknowledged entries must all survive.
	var bgMu sync.Mutex
	var bgAcked []int64
	stopBG := make(chan struct{})
	var bgWG sync.WaitGroup
	startBG := func() {
		stopBG = make(chan struct{})
		bgWG.Add(1)
		go func() {
			defer bgWG.Done()
			bcl := c.Client(0)
			for {
				select {
				case <-stopBG:
					return
				default:
				}
				bgMu.Lock()
				e := int64(len(bgAcked))
				bgMu.Unlock()
				if err := add(ctx, bcl, 1000, e, payloadFor(1000, e, 2000)); err == nil {
					bgMu.Lock()
					bgAcked = append(bgAcked, e)
					bgMu.Unlock()
				}
			}
		}()
	}
	stopBGWriter := func() { close(stopBG); bgWG.Wait() }
	startBG()

	for step := 0; step < steps; step++ {
		l := int64(rng.IntN(6))
		ml := model[l]
		switch k := rng.IntN(100); {
		case k < 50: // add or recovery add
			e := int64(rng.IntN(40))
			p := payloadFor(l, e, rng.IntN(8192))
			recovery := rng.IntN(5) == 0
			_, err := cl.AddEntry(ctx, &bookiev1.AddEntryRequest{LedgerId: l, EntryId: e, Payload: p, LastAddConfirmed: -1, RecoveryAdd: recovery})
			err = bookie.FromStatus(err)
			if ml != nil && ml.fenced && !recovery {
				if !errors.Is(err, bookie.ErrLedgerFenced) {
					t.Fatalf("step %d: add to fenced ledger %d: %v", step, l, err)
				}
				continue
			}
			if err != nil {
				t.Fatalf("step %d: add %d/%d: %v", step, l, e, err)
			}
			if ml == nil {
				ml = &modelLedger{entries: map[int64][]byte{}}
				model[l] = ml
			}
			ml.entries[e] = p
		case k < 70: // read
			e := int64(rng.IntN(40))
			got, err := read(ctx, cl, l, e)
			switch {
			case ml == nil:
				if !errors.Is(err, bookie.ErrNoSuchLedger) {
					t.Fatalf("step %d: read of absent ledger %d: %v", step, l, err)
				}
			case ml.entries[e] == nil:
				if !errors.Is(err, bookie.ErrNoSuchEntry) {
					t.Fatalf("step %d: read of absent entry %d/%d: %v", step, l, e, err)
				}
			default:
				if err != nil || !bytes.Equal(got, ml.entries[e]) {
					t.Fatalf("step %d: read %d/%d: %v (payload equal %v)", step, l, e, err, bytes.Equal(got, ml.entries[e]))
				}
			}
		case k < 76: // fence
			fr, err := cl.Fence(ctx, &bookiev1.FenceRequest{LedgerId: l})
			if err != nil {
				t.Fatalf("step %d: fence %d: %v", step, l, err)
			}
			if ml == nil {
				ml = &modelLedger{entries: map[int64][]byte{}}
				model[l] = ml
			}
			ml.fenced = true
			want := int64(-1)
			for e := range ml.entries {
				want = max(want, e)
			}
			if fr.LastEntryId != want {
				t.Fatalf("step %d: fence %d returned last %d, want %d", step, l, fr.LastEntryId, want)
			}
		case k < 84: // delete
			if _, err := cl.DeleteLedger(ctx, &bookiev1.DeleteLedgerRequest{LedgerId: l}); err != nil {
				t.Fatalf("step %d: delete %d: %v", step, l, err)
			}
			delete(model, l)
		case k < 90:
			st, err := c.Server(0).GC(ctx)
			if err != nil {
				t.Fatalf("step %d: gc: %v", step, err)
			}
			gcTotal.FilesDeleted += st.FilesDeleted
			gcTotal.EntriesRelocated += st.EntriesRelocated
		case k < 94:
			if err := c.Server(0).Checkpoint(ctx); err != nil {
				t.Fatalf("step %d: checkpoint: %v", step, err)
			}
		default: // crash or clean restart
			stopBGWriter()
			if rng.IntN(2) == 0 {
				c.Kill(0)
			} else {
				c.Stop(0)
			}
			if err := c.Restart(0); err != nil {
				t.Fatal(err)
			}
			cl = c.Client(0)
			startBG()
		}
	}
	stopBGWriter()
	// Final full check, after one more crash.
	c.Kill(0)
	if err := c.Restart(0); err != nil {
		t.Fatal(err)
	}
	cl = c.Client(0)
	for l, ml := range model {
		for e, p := range ml.entries {
			if got, err := read(ctx, cl, l, e); err != nil || !bytes.Equal(got, p) {
				t.Fatalf("final: entry %d/%d: %v", l, e, err)
			}
		}
		r, err := cl.ReadLastAddConfirmed(ctx, &bookiev1.ReadLastAddConfirmedRequest{LedgerId: l})
		if err != nil || r.Fenced != ml.fenced {
			t.Fatalf("final: ledger %d fenced=%v want %v (%v)", l, r.GetFenced(), ml.fenced, err)
		}
	}
	for _, e := range bgAcked {
		if got, err := read(ctx, cl, 1000, e); err != nil || !bytes.Equal(got, payloadFor(1000, e, 2000)) {
			t.Fatalf("final: background entry %d lost: %v", e, err)
		}
	}
	t.Logf("seed %d: %d ledgers in model, %d background entries acknowledged and verified; gc deleted %d files, relocated %d entries",
		seed, len(model), len(bgAcked), gcTotal.FilesDeleted, gcTotal.EntriesRelocated)
}
