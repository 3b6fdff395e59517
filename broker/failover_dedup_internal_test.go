package broker

import (
	"errors"
	"testing"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
)

// TestOriginProducerKey: only replicated entries with a producer feed an
// origin-qualified key, with the producer's own batch.
func TestOriginProducerKey(t *testing.T) {
	local := &clientv1.EntryMetadata{ProducerName: "p", SequenceId: 4, HighestSequenceId: 6, OriginRegion: "a"}
	if _, _, _, ok := originProducerKey(local); ok {
		t.Fatal("a local entry feeds an origin-qualified key")
	}
	repl := &clientv1.EntryMetadata{ProducerName: "p", SequenceId: 4, NumMessages: 3, OriginRegion: "a", Replicated: true, OriginSeq: 9}
	name, first, hs, ok := originProducerKey(repl)
	if !ok || name != "meridian.from.a/p" || first != 4 || hs != 6 {
		t.Fatalf("replicated entry: %q [%d, %d] %v", name, first, hs, ok)
	}
	repl.ProducerName = ""
	if _, _, _, ok := originProducerKey(repl); ok {
		t.Fatal("an entry without producer feeds a key")
	}
}

// TestDedupCarryOver: the producer's own key is raised to the highest of
// the origin-qualified keys of the regions it came from (its own region
// skipped); sends at or below are duplicates without a known position.
func TestDedupCarryOver(t *testing.T) {
	ml := &managedLedger{dedup: newDedupTable(10)}
	ml.dedup.storedFrom(fromDedupName("a", "p"), 0, 9, pos{3, 1}, 1)
	ml.dedup.storedFrom(fromDedupName("c", "p"), 0, 4, pos{3, 2}, 1)
	ml.dedup.storedFrom(fromDedupName("b", "p"), 0, 99, pos{3, 3}, 1) // own region: ignored
	if got := ml.openSequence("p", "", "b", nil); got != -1 {
		t.Fatalf("without failover_from: %d, want -1", got)
	}
	if got := ml.openSequence("p", "", "b", []string{"b", "c"}); got != 4 {
		t.Fatalf("from [b c]: %d, want 4", got)
	}
	if got := ml.openSequence("p", "", "b", []string{"a", "c"}); got != 9 {
		t.Fatalf("from [a c]: %d, want 9", got)
	}
	dup, stored, _, _, known := ml.dedup.check("p", 7, 7, 2)
	if !dup || !stored || known {
		t.Fatalf("resend of 7: dup=%v stored=%v known=%v, want a stored duplicate at an unknown position", dup, stored, known)
	}
	if dup, _, _, _, _ := ml.dedup.check("p", 10, 12, 2); dup {
		t.Fatal("send of 10 is a duplicate")
	}
	// Origin-qualified keys follow the LRU limit.
	d := newDedupTable(2)
	d.storedFrom("meridian.from.a/x", 0, 0, pos{1, 0}, 1)
	d.storedFrom("meridian.from.a/y", 0, 0, pos{1, 1}, 2)
	d.storedFrom("meridian.from.a/z", 0, 0, pos{1, 2}, 3)
	if d.len() != 2 || d.lastSequence("meridian.from.a/x") != -1 {
		t.Fatalf("limit 2: %d names, x at %d", d.len(), d.lastSequence("meridian.from.a/x"))
	}
	if err := validateFailoverFrom([]string{"a", "b/c"}); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("bad failover_from: %v", err)
	}
}
