package broker

import (
	"slices"
	"testing"
)

// TestBatchBits: set reports new indexes once; indexes lists them in
// order across words; the cursor record keeps the first maxN entries and
// survives encoding.
func TestBatchBits(t *testing.T) {
	b := &batchBits{}
	for _, i := range []int32{70, 3, 0, 3, 64, 199} {
		b.set(i)
	}
	if got := b.indexes(); !slices.Equal(got, []int32{0, 3, 64, 70, 199}) || b.count != 5 {
		t.Fatalf("indexes %v count %d", got, b.count)
	}
	if b.set(64) {
		t.Fatal("set of a present index reported new")
	}
	m := map[pos]*batchBits{{2, 5}: b, {1, 9}: {words: []uint64{1}, count: 1}, {2, 1}: {words: []uint64{6}, count: 2}}
	rec := batchAcksToRecord(m, 2)
	if len(rec) != 2 || rec[0].L != 1 || rec[0].E != 9 || rec[1].L != 2 || rec[1].E != 1 {
		t.Fatalf("record %+v: want the first 2 entries in position order", rec)
	}
	val := encodeCursorExt(pos{1, 0}, nil, 0, 10, cursorExt{BatchAcks: batchAcksToRecord(m, 10)})
	ext, err := decodeCursorExt(val)
	if err != nil {
		t.Fatal(err)
	}
	if len(ext.BatchAcks) != 3 || !slices.Equal(ext.BatchAcks[2].Words, b.words) {
		t.Fatalf("decoded %+v", ext.BatchAcks)
	}
	if got := formatBatchAcks(ext.BatchAcks); !slices.Equal(got, []string{"1:9:[0]", "2:1:[1,2]", "2:5:[0,3,64,70,199]"}) {
		t.Fatalf("formatted %q", got)
	}
}

// TestMessageCounts: known counts are exact; unknown entries of a ledger
// count as its known average (estimated), or 1 when none is known.
func TestMessageCounts(t *testing.T) {
	ml := &managedLedger{rec: mlRecord{Ledgers: []ledgerInfo{{ID: 7, Seq: 0, Entries: 4}, {ID: 8, Seq: 1, Entries: 2}}}}
	ml.rebuildSeqLocked()
	ml.noteMsgsLocked(pos{7, 0}, 20)
	ml.noteMsgsLocked(pos{7, 1}, 10)
	ml.noteMsgsLocked(pos{7, 1}, 99) // known already: kept
	ml.noteMsgsLocked(pos{9, 0}, 5)  // not a ledger of the topic
	if n, ok := ml.msgsOfLocked(pos{7, 1}); n != 10 || !ok {
		t.Fatalf("7:1 = %d %v", n, ok)
	}
	if n, ok := ml.msgsOfLocked(pos{7, 3}); n != 15 || ok {
		t.Fatalf("7:3 = %d %v, want the estimate 15", n, ok)
	}
	// After 7:0: 10 + 15 + 15 (ledger 7) + 1 + 1 (ledger 8, nothing known).
	if n, exact := ml.msgsAfterLocked(pos{7, 0}); n != 42 || exact {
		t.Fatalf("after 7:0: %d exact=%v, want 42 estimated", n, exact)
	}
	ml.noteMsgsLocked(pos{7, 2}, 1)
	ml.noteMsgsLocked(pos{7, 3}, 1)
	ml.noteMsgsLocked(pos{8, 0}, 3)
	ml.noteMsgsLocked(pos{8, 1}, 4)
	if n, exact := ml.msgsAfterLocked(pos{7, -1}); n != 39 || !exact {
		t.Fatalf("whole topic: %d exact=%v, want 39 exact", n, exact)
	}
	if _, ok := ml.msgs[9]; ok {
		t.Fatal("counts kept for a ledger not in the topic")
	}
	if got := ml.msgs[7].total(4); got != 32 {
		t.Fatalf("ledger 7 total %d, want 32", got)
	}
	if got := ml.msgs[7].total(5); got != 0 {
		t.Fatalf("ledger 7 total with an unknown entry %d, want 0 (unknown)", got)
	}
	// A closed ledger's stored total: exact as a whole, its average for
	// single entries.
	ml2 := &managedLedger{rec: mlRecord{Ledgers: []ledgerInfo{{ID: 3, Seq: 0, Entries: 4, Messages: 40}}}}
	ml2.rebuildSeqLocked()
	if n, exact := ml2.msgsAfterLocked(pos{3, -1}); n != 40 || !exact {
		t.Fatalf("stored total: %d exact=%v, want 40 exact", n, exact)
	}
	if n, exact := ml2.msgsAfterLocked(pos{3, 1}); n != 20 || exact {
		t.Fatalf("after 3:1: %d exact=%v, want 20 estimated", n, exact)
	}
}
