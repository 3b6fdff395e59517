package broker

import (
	"fmt"
	"testing"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
)

// TestReplNamesPinnedInDedup: the replication pseudo-producers are never
// evicted by new producer names and are always in the snapshot, even when
// the snapshot is full of more recently used names.
func TestReplNamesPinnedInDedup(t *testing.T) {
	d := newDedupTable(3)
	d.check(replDedupName("a"), 7, 7, 1)
	d.stored(replDedupName("a"), 7, 7, pos{1, 0}, 1)
	for i := range 10 {
		name := fmt.Sprintf("p%d", i)
		d.check(name, 0, 0, int64(10+i))
		d.stored(name, 0, 0, pos{1, int64(1 + i)}, int64(10+i))
	}
	if got := d.lastSequence(replDedupName("a")); got != 7 {
		t.Fatalf("pinned name evicted: last sequence %d, want 7", got)
	}
	if d.len() != 3 {
		t.Fatalf("%d names tracked, want 3 (limit, pinned one included)", d.len())
	}
	// A snapshot full of other names still holds the pinned one.
	big := newDedupTable(maxDedupSnapshotProducers + 10)
	big.check(replDedupName("b"), 3, 3, 1)
	big.stored(replDedupName("b"), 3, 3, pos{1, 0}, 1)
	for i := range maxDedupSnapshotProducers + 5 {
		name := fmt.Sprintf("p%05d", i)
		big.check(name, 0, 0, int64(10+i))
		big.stored(name, 0, 0, pos{1, int64(1 + i)}, int64(10+i))
	}
	snap, _ := big.snapshot([]ledgerInfo{{ID: 1, Seq: 0, Entries: maxDedupSnapshotProducers + 6}}, 0)
	if s, ok := snap[replDedupName("b")]; !ok || s.Seq != 3 {
		t.Fatalf("pinned name missing from a full snapshot: %v %v", s, ok)
	}
}

// TestDedupKeyOfReplicatedEntry: a replicated entry feeds its origin's
// pseudo-producer with its origin_seq, never its producer's name.
func TestDedupKeyOfReplicatedEntry(t *testing.T) {
	md := &clientv1.EntryMetadata{ProducerName: "p", SequenceId: 4, NumMessages: 3, Replicated: true, OriginRegion: "b", OriginSeq: 42}
	if n, f, h, ok := dedupKey(md); !ok || n != "meridian.repl.b" || f != 42 || h != 42 {
		t.Fatalf("replicated: %q %d %d %v", n, f, h, ok)
	}
	md.Replicated = false
	if n, f, h, ok := dedupKey(md); !ok || n != "p" || f != 4 || h != 6 {
		t.Fatalf("local: %q %d %d %v", n, f, h, ok)
	}
	if _, _, _, ok := dedupKey(&clientv1.EntryMetadata{Replicated: true, OriginRegion: "b"}); ok {
		t.Fatal("replicated entry without origin_seq feeds dedup")
	}
}

// TestReplGuardBarrier: after a rejection of origin_seq 5 a stream stores
// nothing of that origin above 5 until the sender resends from 5 or the
// entry 5 is queued by another stream.
func TestReplGuardBarrier(t *testing.T) {
	var g replGuard
	filledAt := int64(4)
	filled := func(b int64) bool { return filledAt >= b }
	g.set("a", 7)
	g.set("a", 5)
	if b, barred := g.check("a", 6, filled); !barred || b != 5 {
		t.Fatalf("6 after a rejection of 5: barred=%v at %d", barred, b)
	}
	if _, barred := g.check("b", 9, filled); barred {
		t.Fatal("another origin barred")
	}
	if _, barred := g.check("a", 5, filled); barred {
		t.Fatal("the rewind to 5 barred")
	}
	if _, barred := g.check("a", 9, filled); barred {
		t.Fatal("barrier not lifted by the rewind")
	}
	g.set("a", 10)
	filledAt = 10 // another stream queued 10
	if _, barred := g.check("a", 12, filled); barred {
		t.Fatal("barrier not lifted once its entry is queued elsewhere")
	}
}

// replCheck (tests only) is replPeek then, for an append, replRecord.
func (ml *managedLedger) replCheck(name string, seq int64, relayed bool) replVerdict {
	v := ml.replPeek(name, seq, relayed)
	if v == replAppend {
		ml.replRecord(name, seq)
	}
	return v
}
