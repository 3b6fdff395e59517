package broker

import (
	"math/rand"
	"testing"
)

// TestAckVectorMatchesSet checks add, setMD, join, covers and contains
// against a plain set model with random operations.
func TestAckVectorMatchesSet(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	for round := 0; round < 200; round++ {
		v, w := ackVector{}, ackVector{}
		sv, sw := map[int64]bool{}, map[int64]bool{}
		apply := func(x ackVector, s map[int64]bool) {
			if rng.Intn(5) == 0 {
				md := int64(rng.Intn(40))
				x.setMD("a", md)
				for i := int64(1); i <= md; i++ {
					s[i] = true
				}
				return
			}
			f := int64(rng.Intn(60) + 1)
			l := f + int64(rng.Intn(4))
			x.add("a", f, l)
			for i := f; i <= l; i++ {
				s[i] = true
			}
		}
		for i := 0; i < 20; i++ {
			apply(v, sv)
			apply(w, sw)
		}
		check := func(name string, x ackVector, s map[int64]bool) {
			for i := int64(1); i <= 70; i++ {
				if x.covers("a", i) != s[i] {
					t.Fatalf("round %d %s: covers(%d) = %v, want %v (%+v)", round, name, i, x.covers("a", i), s[i], x["a"])
				}
			}
			o := x["a"]
			if o == nil {
				return
			}
			for i, r := range o.Ranges {
				if r.First <= o.MD+1 || r.Last < r.First || i > 0 && r.First <= o.Ranges[i-1].Last+1 {
					t.Fatalf("round %d %s: not normalized: %+v", round, name, o)
				}
			}
		}
		check("v", v, sv)
		check("w", w, sw)
		subset := true
		for i := range sw {
			if !sv[i] {
				subset = false
			}
		}
		if v.contains(w) != subset {
			t.Fatalf("round %d: contains = %v, want %v", round, v.contains(w), subset)
		}
		j := v.clone()
		j.join(w)
		for i := range sw {
			sv[i] = true
		}
		check("join", j, sv)
		if !j.contains(w) || !j.contains(v) {
			t.Fatalf("round %d: join does not contain its parts", round)
		}
		if j.join(w) || j.join(v) {
			t.Fatalf("round %d: joining again changed the vector", round)
		}
		back, err := ackVectorFromProto("v", j.toProto())
		if err != nil || !back.contains(j) || !j.contains(back) {
			t.Fatalf("round %d: proto round trip: %v", round, err)
		}
	}
}

func TestAckVectorFromProtoRejectsBadRanges(t *testing.T) {
	v := ackVector{}
	v.add("a", 3, 5)
	p := v.toProto()
	p.Origins["a"].Acked[0].First = 9
	if _, err := ackVectorFromProto("update.vector", p); err == nil {
		t.Fatal("first > last accepted")
	}
	p.Origins["bad name!"] = p.Origins["a"]
	if _, err := ackVectorFromProto("update.vector", p); err == nil {
		t.Fatal("bad origin name accepted")
	}
}
