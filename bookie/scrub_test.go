package bookie_test

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	bookiev1 "github.com/meridianmq/meridian/api/bookie/v1"
	"github.com/meridianmq/meridian/bookie"
	"github.com/meridianmq/meridian/bookie/autorecovery"
	"github.com/meridianmq/meridian/bookie/bookietest"
	"github.com/meridianmq/meridian/internal/faultfs"
	"github.com/meridianmq/meridian/metadata/metadatatest"
)

// markRecorder records the ledgers a bookie marks under-replicated.
type markRecorder struct {
	mu     sync.Mutex
	marked map[int64][]string
}

func (m *markRecorder) mark(_ context.Context, id int64, reason string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.marked == nil {
		m.marked = map[int64][]string{}
	}
	m.marked[id] = append(m.marked[id], reason)
	return nil
}

func (m *markRecorder) has(id int64) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.marked[id]) > 0
}

// Journal files under the checkpoint were not verified at start: corruption
// there showed only when a read hit it, as a metric. The scrub that runs
// soon after start finds it without any read, flags the entry corrupt and
// marks its ledger under-replicated; the on-demand scrub reports it.
func TestScrubFindsCorruptionUnderCheckpoint(t *testing.T) {
	rec := &markRecorder{}
	c := bookietest.StartCluster(t, 1, bookietest.WithConfig(func(_ int, cfg *bookie.Config) {
		cfg.ScrubStartDelay = 200 * time.Millisecond
		cfg.ScrubInterval = time.Hour
		cfg.MarkUnderReplicated = rec.mark
	}))
	ctx := ctxT(t)
	cl := c.Client(0)
	for e := int64(0); e < 20; e++ {
		if err := add(ctx, cl, 11, e, payloadFor(11, e, 2048)); err != nil {
			t.Fatal(err)
		}
		if err := add(ctx, cl, 12, e, payloadFor(12, e, 2048)); err != nil {
			t.Fatal(err)
		}
	}
	jdir, _ := c.Dirs(0)
	c.Stop(0) // checkpoint: replay will not read these records again
	bookietest.FlipJournalByte(t, jdir, payloadFor(11, 7, 2048))
	if err := c.Restart(0); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "background scrub marks ledger 11", func() bool { return rec.has(11) })
	if rec.has(12) {
		t.Fatal("intact ledger 12 marked under-replicated")
	}
	res, err := c.Server(0).Scrub(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("scrub: %+v", res)
	if res.CorruptEntries != 1 || len(res.Ranges) != 1 || res.Ranges[0] != (bookie.CorruptRange{Ledger: 11, FirstEntry: 7, LastEntry: 7}) ||
		!slices.Equal(res.LedgersMarked, []int64{11}) || res.EntriesChecked < 39 {
		t.Fatalf("scrub result %+v", res)
	}
	cl = c.Client(0)
	if _, err := read(ctx, cl, 11, 7); !errors.Is(err, bookie.ErrEntryCorrupt) {
		t.Fatalf("corrupt entry read: %v", err)
	}
	if ro, why := c.Server(0).ReadOnly(); ro {
		t.Fatalf("bookie read-only after scrub found damage: %s", why)
	}
	// A recovery add of a good copy (what autorecovery does) repairs it.
	if _, err := cl.AddEntry(ctx, &bookiev1.AddEntryRequest{LedgerId: 11, EntryId: 7, Payload: payloadFor(11, 7, 2048), LastAddConfirmed: 6, RecoveryAdd: true}); err != nil {
		t.Fatal(err)
	}
	if got, err := read(ctx, cl, 11, 7); err != nil || !bytes.Equal(got, payloadFor(11, 7, 2048)) {
		t.Fatalf("entry after repair: %v", err)
	}
	if res, err = c.Server(0).Scrub(ctx); err != nil || res.CorruptEntries != 0 {
		t.Fatalf("scrub after repair: %+v, %v", res, err)
	}
	// The repair survives restarts (the repaired index is checkpointed).
	c.Stop(0)
	if err := c.Restart(0); err != nil {
		t.Fatal(err)
	}
	checkAcked(t, c.Client(0), 11, []int64{0, 7, 19}, 2048)
}

// The bookie registry entry says why a bookie is read-only.
func TestRegistryCarriesReadOnlyReason(t *testing.T) {
	store := metadatatest.Start(t)
	c := bookietest.StartCluster(t, 1, bookietest.WithMetadata(store))
	c.FaultFS(0).SetUsage(&faultfs.Usage{Total: 100, Free: 1})
	c.Server(0).CheckDisk()
	waitFor(t, 20*time.Second, "read-only reason in registry", func() bool {
		bi := registry(t, store)[c.ID(0)]
		return bi.ReadOnly && strings.Contains(bi.ReadOnlyReason, "disk usage")
	})
	// `meridian admin bookies list` shows it (through autorecovery.Status).
	st, err := autorecovery.Status(ctxT(t), store)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Bookies) != 1 || !strings.Contains(st.Bookies[0].ReadOnlyReason, "disk usage") {
		t.Fatalf("status bookies: %+v", st.Bookies)
	}
	c.FaultFS(0).SetUsage(nil)
	c.Server(0).CheckDisk()
	waitFor(t, 20*time.Second, "writable, no reason", func() bool {
		bi := registry(t, store)[c.ID(0)]
		return !bi.ReadOnly && bi.ReadOnlyReason == ""
	})
}
