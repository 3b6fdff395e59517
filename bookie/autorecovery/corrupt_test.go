package autorecovery_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	bookiev1 "github.com/meridianmq/meridian/api/bookie/v1"
	"github.com/meridianmq/meridian/bookie"
	"github.com/meridianmq/meridian/bookie/autorecovery"
	"github.com/meridianmq/meridian/bookie/bookietest"
	"github.com/meridianmq/meridian/metadata"
	"github.com/meridianmq/meridian/metadata/metadatatest"
)

// newScrubEnv is newEnv with bookies that scrub soon after start and mark
// the ledgers they find damaged, as `meridian bookie` does.
func newScrubEnv(t *testing.T, n int) *env {
	t.Helper()
	store := metadatatest.Start(t)
	bk := bookietest.StartCluster(t, n, bookietest.WithMetadata(store), bookietest.WithRacks(racks...),
		bookietest.WithConfig(func(_ int, cfg *bookie.Config) {
			id := cfg.ID
			cfg.ScrubStartDelay = 200 * time.Millisecond
			cfg.ScrubInterval = time.Hour
			cfg.MarkUnderReplicated = func(ctx context.Context, ledgerID int64, reason string) error {
				return autorecovery.MarkCorrupt(ctx, store, ledgerID, id, reason)
			}
		}))
	return newEnvOn(t, n, store, bk, nil)
}

// Autorecovery never counted a corrupt replica on a LIVE bookie as
// under-replicated, and nothing repaired it. Now the bookie's scrub finds
// the damage (in journal files under the checkpoint, without any read),
// marks the ledger, and a worker rewrites the damaged replica in place from
// the healthy ones: the same bookie then serves every entry intact, and no
// acknowledged entry is lost.
func TestCorruptReplicaOnLiveBookieIsRewritten(t *testing.T) {
	e := newScrubEnv(t, 3)
	w := e.create(3, 3, 2)
	e.append(w, 40)
	if err := w.Close(e.ctx()); err != nil {
		t.Fatal(err)
	}
	id := w.ID()
	const victim = 1
	jdir, _ := e.bk.Dirs(victim)
	e.bk.Stop(victim) // checkpoint: the damage is under it
	// Entries up to 30 grow in size, so each payload first appears in its own record.
	damaged := []int64{5, 6, 10, 30}
	for _, ent := range damaged {
		bookietest.FlipJournalByte(t, jdir, payload(id, int(ent)))
	}
	if err := e.bk.Restart(victim); err != nil {
		t.Fatal(err)
	}
	// The start-up scrub marks the ledger, naming the damaged replica.
	e.waitFor("scrub marks the ledger", 30*time.Second, func() (bool, string) {
		kv, err := e.store.Get(e.ctx(), autorecovery.UnderReplicatedKey(id), metadata.ReadOptions{})
		return err == nil && bytes.Contains(kv.Value, []byte(e.bk.ID(victim))), fmt.Sprintf("mark: %v", err)
	})
	cl := e.bk.Client(victim)
	for _, ent := range damaged {
		_, err := cl.ReadEntry(e.ctx(), &bookiev1.ReadEntryRequest{LedgerId: id, EntryId: ent})
		if !errors.Is(bookie.FromStatus(err), bookie.ErrEntryCorrupt) {
			t.Fatalf("entry %d on the damaged replica: %v, want entry corrupt", ent, err)
		}
	}
	if ro, why := e.bk.Server(victim).ReadOnly(); ro {
		t.Fatalf("damaged bookie went read-only: %s", why)
	}
	e.startAuditor("auditor", nil)
	e.startWorker(e.workerConfig("worker", nil))
	e.waitFor("mark resolved", 45*time.Second, func() (bool, string) {
		m := e.marks()
		return len(m) == 0, fmt.Sprintf("marks: %+v", m)
	})
	// Repaired in place: the bookie is still in the ensemble and holds every
	// entry intact; every acknowledged entry reads back.
	if !uses(e.metadataOf(id), e.bk.ID(victim)) {
		t.Fatalf("damaged bookie replaced instead of repaired: %+v", e.metadataOf(id).Segments)
	}
	e.verifyReplicas()
	res, err := e.bk.Server(victim).Scrub(e.ctx())
	if err != nil || res.CorruptEntries != 0 || slices.Contains(res.Ledgers, id) {
		t.Fatalf("scrub after repair: %+v, %v", res, err)
	}
}
