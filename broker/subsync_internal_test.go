package broker

import (
	"testing"
	"time"
)

// vecOf builds a vector of origin "a": mark-delete then ranges.
func vecOf(md int64, ranges ...int64) ackVector {
	v := ackVector{}
	v.setMD("a", md)
	for i := 0; i+1 < len(ranges); i += 2 {
		v.add("a", ranges[i], ranges[i+1])
	}
	return v
}

func TestMissingFrom(t *testing.T) {
	for _, c := range []struct {
		name         string
		v, w         ackVector
		ranges, acks int64
	}{
		{"nothing confirmed", vecOf(10, 20, 25), nil, 2, 16},
		{"all confirmed", vecOf(10, 20, 25), vecOf(10, 20, 25), 0, 0},
		{"confirmed more", vecOf(5), vecOf(10), 0, 0},
		{"mark-delete moved", vecOf(10), vecOf(4), 1, 6},
		{"holes in the confirmed", vecOf(10), vecOf(2, 5, 6), 2, 6},
		{"range partly confirmed", vecOf(0, 5, 15), vecOf(0, 8, 9, 12, 20), 2, 5},
		{"other origin", ackVector{"b": {MD: 3}}, vecOf(10), 1, 3},
	} {
		r, a := c.v.missingFrom(c.w)
		if r != c.ranges || a != c.acks {
			t.Errorf("%s: missingFrom = %d ranges, %d acks; want %d, %d", c.name, r, a, c.ranges, c.acks)
		}
	}
}

func TestCmpEpoch(t *testing.T) {
	for _, c := range []struct {
		e1   int64
		r1   string
		e2   int64
		r2   string
		want int
	}{
		{0, "", 0, "", 0}, {1, "a", 0, "z", 1}, {0, "z", 1, "a", -1}, {2, "b", 2, "a", 1}, {2, "a", 2, "b", -1}, {3, "c", 3, "c", 0},
	} {
		if got := cmpEpoch(c.e1, c.r1, c.e2, c.r2); got != c.want {
			t.Errorf("cmpEpoch(%d %q, %d %q) = %d, want %d", c.e1, c.r1, c.e2, c.r2, got, c.want)
		}
	}
}

// TestChangeMarks: marks never understate a remote's lag — bucketed
// changes keep the oldest time, a full list merges its oldest marks, and
// pruning drops only confirmed versions.
func TestChangeMarks(t *testing.T) {
	var c coverState
	c.changed()
	first := c.marks[0].at
	c.changed() // same bucket
	if len(c.marks) != 1 || c.marks[0].ver != 2 || !c.marks[0].at.Equal(first) {
		t.Fatalf("bucketed marks: %+v", c.marks)
	}
	if at := lagSince(c.marks, 1); !at.Equal(first) {
		t.Fatalf("lag of a remote at version 1 counts from %v, want %v", at, first)
	}
	if at := lagSince(c.marks, 2); !at.IsZero() {
		t.Fatalf("a remote with every version has a lag from %v", at)
	}
	// A full list: the oldest two marks merge, keeping the oldest time.
	base := time.Now().Add(-2 * time.Hour)
	c.marks = nil
	for i := range maxMarks {
		c.marks = append(c.marks, verMark{ver: int64(i + 1), at: base.Add(time.Duration(i) * time.Second)})
	}
	c.ver = maxMarks
	c.changed()
	if len(c.marks) != maxMarks || c.marks[len(c.marks)-1].ver != maxMarks+1 {
		t.Fatalf("%d marks, last %+v; want %d, the new version last", len(c.marks), c.marks[len(c.marks)-1], maxMarks)
	}
	if !c.marks[0].at.Equal(base) || c.marks[0].ver != 2 {
		t.Fatalf("merged oldest mark %+v, want version 2 at %v", c.marks[0], base)
	}
	c.pruneMarks(5)
	if c.marks[0].ver <= 5 {
		t.Fatalf("pruned to %+v", c.marks[0])
	}
}

// TestVectorBatchAcks: batch-index acks join, are pruned by whole acks,
// round-trip through the wire and stop at the per-origin bound (never
// claiming more).
func TestVectorBatchAcks(t *testing.T) {
	v := ackVector{}
	if !v.addBatch("a", 5, []uint64{0b101}) || v.addBatch("a", 5, []uint64{0b001}) {
		t.Fatal("addBatch: want changed, then unchanged")
	}
	w := ackVector{}
	w.addBatch("a", 5, []uint64{0b010})
	if v.contains(w) || !v.join(w) || !v.contains(w) {
		t.Fatal("join of batch acks")
	}
	if got := v.batchOf("a", 5); len(got) != 1 || got[0] != 0b111 {
		t.Fatalf("batchOf = %v, want [7]", got)
	}
	p, err := ackVectorFromProto("v", v.toProto())
	if err != nil || p.batchOf("a", 5)[0] != 0b111 {
		t.Fatalf("round trip: %v %v", p, err)
	}
	v.setMD("a", 5)
	if v.batchOf("a", 5) != nil {
		t.Fatal("a whole ack did not prune the batch acks")
	}
	for seq := int64(10); seq < 10+DefaultMaxVectorBatchSeqs+5; seq++ {
		v.addBatch("a", seq, []uint64{1})
	}
	if n := len(v["a"].Batch); n != DefaultMaxVectorBatchSeqs {
		t.Fatalf("%d batch entries kept, bound %d", n, DefaultMaxVectorBatchSeqs)
	}
	if v.batchOf("a", 10+DefaultMaxVectorBatchSeqs) != nil {
		t.Fatal("an entry past the bound was recorded")
	}
}
