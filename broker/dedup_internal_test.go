package broker

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// TestDedupLRUSurvivesTakeover: the LRU order is by real last use and is
// carried by the snapshot, so after a takeover the name forgotten first is
// the one least recently used, not an arbitrary one.
func TestDedupLRUSurvivesTakeover(t *testing.T) {
	d := newDedupTable(3)
	for i, name := range []string{"a", "b", "c"} {
		if dup, _, _, _, _ := d.check(name, 0, 0, int64(100+i)); dup {
			t.Fatalf("first send of %s is a duplicate", name)
		}
		d.stored(name, 0, 0, pos{7, int64(i)}, int64(100+i))
	}
	// a sends again (a duplicate still counts as a use): b is now the LRU.
	if dup, stored, id, bi, known := d.check("a", 0, 0, 200); !dup || !stored || !known || id != (pos{7, 0}) || bi != 0 {
		t.Fatalf("resend of a: dup=%v stored=%v known=%v id=%v index=%d", dup, stored, known, id, bi)
	}
	ledgers := []ledgerInfo{{ID: 7, Seq: 0, Entries: 3}}
	snap, through := d.snapshot(ledgers, 0)
	if through != 0 || len(snap) != 3 {
		t.Fatalf("snapshot of 3 names: through %d, %d names", through, len(snap))
	}
	// Takeover: a new table restored from the snapshot.
	d2 := newDedupTable(3)
	d2.restore(snap, nil)
	d2.order()
	d2.check("d", 0, 0, 300)
	for name, want := range map[string]int64{"a": 0, "b": -1, "c": 0, "d": 0} {
		if got := d2.lastSequence(name); got != want {
			t.Errorf("after takeover and a new name, last sequence of %s is %d, want %d (b was least recently used)", name, got, want)
		}
	}
	// Producers found in scanned ledgers are tracked beyond the limit; a
	// new name then forgets only the least recently used one.
	d3 := newDedupTable(2)
	d3.restore(snap, nil)
	d3.observe("e", 4, 4, pos{8, 0}, 250)
	d3.order()
	if d3.len() != 4 {
		t.Fatalf("restored and scanned producers tracked: %d, want 4", d3.len())
	}
	d3.check("f", 0, 0, 400)
	if d3.len() != 4 || d3.lastSequence("b") != -1 || d3.lastSequence("c") != 0 {
		t.Fatalf("after a new name beyond the limit: %d tracked, b=%d c=%d (want 4, -1, 0)", d3.len(), d3.lastSequence("b"), d3.lastSequence("c"))
	}
}

// TestDedupSnapshotLeavesOutOldestAndRescans: beyond the snapshot's limit
// the least recently used names are left out, and DedupThrough stays below
// the ledgers holding their last batches so a takeover finds them again,
// within the rescan bounds.
func TestDedupSnapshotLeavesOutOldestAndRescans(t *testing.T) {
	n := maxDedupSnapshotProducers + 10
	d := newDedupTable(n)
	// Names 0..9 wrote in ledger seq 2 (id 12), the rest in seq 3 (id 13),
	// later.
	for i := range n {
		name := fmt.Sprintf("p%05d", i)
		l := int64(13)
		if i < 10 {
			l = 12
		}
		d.check(name, 5, 5, int64(1000+i))
		d.stored(name, 5, 5, pos{l, int64(i)}, int64(1000+i))
	}
	ledgers := []ledgerInfo{
		{ID: 10, Seq: 0, Entries: 100}, {ID: 11, Seq: 1, Entries: 100},
		{ID: 12, Seq: 2, Entries: 10}, {ID: 13, Seq: 3, Entries: int64(n - 10)}, {ID: 14, Seq: 4, Entries: -1},
	}
	snap, through := d.snapshot(ledgers, 3)
	if len(snap) != maxDedupSnapshotProducers {
		t.Fatalf("snapshot holds %d names, want %d", len(snap), maxDedupSnapshotProducers)
	}
	if _, ok := snap["p00000"]; ok {
		t.Fatal("the least recently used name is in the full snapshot")
	}
	if _, ok := snap[fmt.Sprintf("p%05d", n-1)]; !ok {
		t.Fatal("the most recently used name is not in the snapshot")
	}
	if through != 1 {
		t.Fatalf("DedupThrough %d, want 1 (rescan the ledger holding the names left out)", through)
	}
	// A ledger too big to rescan: the names left out are forgotten.
	ledgers[2].Entries = maxDedupRescanEntries + 1
	if _, through := d.snapshot(ledgers, 3); through != 2 {
		t.Fatalf("DedupThrough %d with an oversize ledger to rescan, want 2", through)
	}
}

// TestDedupRecentBatchIDs: a duplicate of one of the producer's recent
// batches is answered with where it was first stored (with its index in
// the batch); older ones, and all but the last after a restore from the
// snapshot, are duplicates without an ID.
func TestDedupRecentBatchIDs(t *testing.T) {
	d := newDedupTable(10)
	const batches = dedupRecentBatches + 4
	for i := range int64(batches) {
		d.check("p", 2*i, 2*i+1, 100)
		d.stored("p", 2*i, 2*i+1, pos{9, i}, 100)
	}
	for _, c := range []struct {
		seq   int64
		known bool
		at    pos
		index int32
	}{
		{2*(batches-1) + 1, true, pos{9, batches - 1}, 1},
		{2 * 4, true, pos{9, 4}, 0},
		{2*4 + 1, true, pos{9, 4}, 1},
		{2*3 + 1, false, pos{}, 0},
		{0, false, pos{}, 0},
	} {
		dup, stored, at, index, known := d.check("p", c.seq, c.seq, 200)
		if !dup || !stored || known != c.known || at != c.at || index != c.index {
			t.Errorf("resend of %d: dup=%v stored=%v known=%v at=%v index=%d, want known=%v at=%v index=%d",
				c.seq, dup, stored, known, at, index, c.known, c.at, c.index)
		}
	}
	snap, _ := d.snapshot([]ledgerInfo{{ID: 9, Seq: 0, Entries: batches}}, 0)
	d2 := newDedupTable(10)
	d2.restore(snap, nil)
	d2.order()
	if _, _, at, _, known := d2.check("p", 2*(batches-1), 2*(batches-1), 300); !known || at != (pos{9, batches - 1}) {
		t.Errorf("after restore, the last batch: known=%v at=%v", known, at)
	}
	if _, _, _, _, known := d2.check("p", 2*4, 2*4, 300); known {
		t.Error("after restore, an older batch has a known ID")
	}
}

// TestDedupSnapshotFitsTheMetadataLimit: names that grow when escaped in
// JSON cannot push the snapshot over the metadata value limit (1 MiB).
func TestDedupSnapshotFitsTheMetadataLimit(t *testing.T) {
	d := newDedupTable(maxDedupSnapshotProducers)
	for i := range maxDedupSnapshotProducers {
		name := fmt.Sprintf("%04d", i) + strings.Repeat("\x01", 252)
		d.check(name, 0, 0, int64(i))
		d.stored(name, 0, 0, pos{1, int64(i)}, int64(i))
	}
	snap, _ := d.snapshot([]ledgerInfo{{ID: 1, Seq: 0, Entries: maxDedupSnapshotProducers}}, 0)
	b, err := json.Marshal(mlRecord{Producers: snap})
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > maxDedupSnapshotBytes+4<<10 {
		t.Fatalf("snapshot of %d names is %d bytes, over %d", len(snap), len(b), maxDedupSnapshotBytes)
	}
	t.Logf("%d escaped names in %d bytes", len(snap), len(b))
}
