package broker

import (
	"encoding/json"
	"math/rand"
	"testing"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
)

// TestScopedClaims: a region's scoped claim holds only for the entries
// that are for it (its origin region's, and those neither local-only nor
// restricted by replicate_to without it); exact claims hold everywhere;
// folding another origin's exact claim keeps its mark-delete exact and
// moves the rest into the own scoped claim.
func TestScopedClaims(t *testing.T) {
	all := scopeOf(&clientv1.EntryMetadata{})
	local := scopeOf(&clientv1.EntryMetadata{DisableReplication: true})
	ac := scopeOf(&clientv1.EntryMetadata{ReplicateTo: []string{"c", "a"}})
	if all != scopeAll || local != scopeLocal || ac != scopeOf(&clientv1.EntryMetadata{ReplicateTo: []string{"a", "c", "a"}}) {
		t.Fatalf("scopes: %d %d %d", all, local, ac)
	}
	if !ac.includes("c") || ac.includes("b") || local.includes("b") || !all.includes("b") {
		t.Fatal("includes")
	}
	v := ackVector{}
	v.setMD(scopedKey("b", "a@1"), 10) // b: a's 1..10 acknowledged or not for b
	v.add("a@1", 20, 20)               // exact
	cases := []struct {
		k    originKey
		self string
		want bool
	}{
		{originKey{Region: "a@1", Seq: 5, Scope: all}, "c", true},    // for b too: b's claim holds
		{originKey{Region: "a@1", Seq: 5, Scope: ac}, "c", false},    // kept out of b: b's claim says nothing
		{originKey{Region: "a@1", Seq: 5, Scope: local}, "a", false}, // a's local-only entry
		{originKey{Region: "a@1", Seq: 5, Scope: ac}, "b", true},     // stored in b: for b
		{originKey{Region: "a@1", Seq: 20, Scope: local}, "a", true}, // exact
		{originKey{Region: "a@1", Seq: 11, Scope: all}, "c", false},
		{originKey{Region: "a@2", Seq: 5, Scope: all}, "c", false}, // another stream
	}
	for i, c := range cases {
		if got := v.coversEntry(c.k, c.self); got != c.want {
			t.Errorf("case %d: coversEntry(%+v) in %s = %v, want %v", i, c.k, c.self, got, c.want)
		}
	}
	// b's claim about b's own entries is exact-equivalent: b is their origin.
	v.setMD(scopedKey("b", "b@3"), 4)
	if !v.coversEntry(originKey{Region: "b@3", Seq: 4, Scope: ac}, "c") {
		t.Error("the origin region's claim about its own entries must hold for every one of them")
	}
	// Batch indexes over the claims that hold.
	v.addBatch(scopedKey("b", "a@1"), 30, []uint64{0b01})
	v.addBatch("a@1", 30, []uint64{0b10})
	if ws := v.batchOfEntry(originKey{Region: "a@1", Seq: 30, Scope: all}, "c"); len(ws) != 1 || ws[0] != 0b11 {
		t.Errorf("batchOfEntry = %v, want [3]", ws)
	}
	if ws := v.batchOfEntry(originKey{Region: "a@1", Seq: 30, Scope: ac}, "c"); len(ws) != 1 || ws[0] != 0b10 {
		t.Errorf("batchOfEntry (kept out of b) = %v, want [2]", ws)
	}

	f := ackVector{}
	f.setMD("a@1", 3)
	f.add("a@1", 5, 5)
	f.add("a@1", 7, 9)
	f.add("b@2", 6, 6) // b's own stream: stays exact
	if !f.foldForeign("b", nil) {
		t.Fatal("fold: no change")
	}
	if o := f["a@1"]; o.MD != 3 || len(o.Ranges) != 0 {
		t.Fatalf("exact claim after the fold: %+v, want its mark-delete only", o)
	}
	if s := f[scopedKey("b", "a@1")]; s == nil || s.MD != 3 || len(s.Ranges) != 2 {
		t.Fatalf("b's claim after the fold: %+v", s)
	}
	if len(f["b@2"].Ranges) != 1 || f.foldForeign("b", nil) {
		t.Fatal("the own stream was folded, or a second fold changed something")
	}
	// The wire form keeps the scoped claims apart.
	p := f.toProto()
	if len(p.GetScoped()["b"].GetOrigins()["a@1"].GetAcked()) != 2 || p.GetOrigins()[scopedKey("b", "a@1")] != nil {
		t.Fatalf("wire form: %v", p)
	}
	back, err := ackVectorFromProto("v", p)
	if err != nil || !back.contains(f) || !f.contains(back) {
		t.Fatalf("round trip: %v", err)
	}
	p.Scoped["bad>name"] = p.Scoped["b"]
	if _, err := ackVectorFromProto("v", p); err == nil {
		t.Fatal("a bad claiming region was accepted")
	}
}

// randVector builds a random vector over two keys.
func randVector(rng *rand.Rand) ackVector {
	v := ackVector{}
	for _, key := range []string{"a", "b>a"} {
		if rng.Intn(3) == 0 {
			v.setMD(key, int64(rng.Intn(30)))
		}
		for range rng.Intn(30) {
			f := int64(rng.Intn(200) + 1)
			v.add(key, f, f+int64(rng.Intn(3)))
		}
		for range rng.Intn(5) {
			v.addBatch(key, int64(rng.Intn(200)+1), []uint64{uint64(rng.Intn(16)), uint64(rng.Intn(4))})
		}
	}
	return v
}

// TestVectorDeltaAndTrim: v.minus(w) joined to w contains v and shares
// nothing with w; trim keeps a vector within its bound, keeps its
// mark-deletes and never acknowledges more than before.
func TestVectorDeltaAndTrim(t *testing.T) {
	rng := rand.New(rand.NewSource(6))
	for round := range 300 {
		v, w := randVector(rng), randVector(rng)
		d := v.minus(w)
		j := w.clone()
		j.join(d)
		if !j.contains(v) {
			t.Fatalf("round %d: w + (v - w) does not contain v", round)
		}
		for key, o := range d {
			for _, r := range o.intervals() {
				for s := r.First; s <= r.Last; s++ {
					if w.covers(key, s) || !v.covers(key, s) {
						t.Fatalf("round %d: delta has %s:%d (in w %v, in v %v)", round, key, s, w.covers(key, s), v.covers(key, s))
					}
				}
			}
		}
		if !v.minus(v).empty() {
			t.Fatalf("round %d: v - v is not empty", round)
		}
		// approxBytes bounds the cursor record's form from above.
		if rec, _ := json.Marshal(vectorToRecord(v, 1<<30)); len(rec) > v.approxBytes()+2 {
			t.Fatalf("round %d: the record takes %d bytes, approxBytes %d", round, len(rec), v.approxBytes())
		}
		limit := 64 + rng.Intn(400)
		c := v.clone()
		c.trim(limit)
		if c.approxBytes() > limit {
			for _, o := range c {
				if len(o.Ranges) > 0 || len(o.Batch) > 0 {
					t.Fatalf("round %d: %d bytes after trim to %d, ranges left", round, c.approxBytes(), limit)
				}
			}
		}
		if !v.contains(c) {
			t.Fatalf("round %d: the trimmed vector acknowledges more", round)
		}
		for key, o := range v {
			if c[key].MD != o.MD {
				t.Fatalf("round %d: trim changed the mark-delete of %s", round, key)
			}
		}
	}
	// A custom batch bound (subscriptions.max_vector_batch_seqs) holds.
	v := ackVector{}
	lim := &vecLimits{maxBytes: 1 << 20, batchSeqs: 3, batchWords: 100}
	for seq := int64(1); seq <= 10; seq++ {
		v.addBatchLim("a", seq, []uint64{1}, lim)
	}
	if len(v["a"].Batch) != 3 {
		t.Fatalf("%d batch entries, bound 3", len(v["a"].Batch))
	}
}

// TestSkipReports: the receiver's skip reports per stream merge, answer
// how many values right below an entry are not for this region (never
// below the highest stored entry), and are forgotten at or below it.
func TestSkipReports(t *testing.T) {
	var rs []seqRange
	for _, r := range []seqRange{{10, 12}, {3, 4}, {13, 13}, {20, 25}, {5, 5}} {
		rs = addSeqRange(rs, r)
	}
	if want := []seqRange{{3, 5}, {10, 13}, {20, 25}}; len(rs) != 3 || rs[0] != want[0] || rs[1] != want[1] || rs[2] != want[2] {
		t.Fatalf("merged: %v", rs)
	}
	r := &replState{skips: map[string][]seqRange{"a@1": rs}}
	for _, c := range []struct{ seq, stored, want int64 }{
		{14, 2, 4},  // 10..13
		{6, 2, 3},   // 3..5
		{6, 3, 2},   // not below stored+1: 4..5
		{15, 2, 0},  // 14 was not reported
		{26, 14, 6}, // 20..25; reports at or below 14 forgotten
		{6, 14, 0},
	} {
		if got := r.skippedBeforeLocked("a@1", c.seq, c.stored); got != c.want {
			t.Fatalf("skippedBefore(%d, stored %d) = %d, want %d", c.seq, c.stored, got, c.want)
		}
	}
	if got := r.skips["a@1"]; len(got) != 1 || got[0] != (seqRange{20, 25}) {
		t.Fatalf("left: %v", got)
	}
}
