package broker

import (
	"math/rand/v2"
	"reflect"
	"testing"
)

// TestSeqRangesAdd: intervals merge when they overlap or touch, stay apart
// otherwise, and the lowest are forgotten beyond the bound.
func TestSeqRangesAdd(t *testing.T) {
	cases := []struct {
		name string
		add  [][2]int64
		max  int
		want [][2]int64
	}{
		{"one", [][2]int64{{1, 5}}, 16, [][2]int64{{1, 5}}},
		{"adjacent", [][2]int64{{1, 5}, {6, 9}}, 16, [][2]int64{{1, 9}}},
		{"gap", [][2]int64{{1, 5}, {7, 9}}, 16, [][2]int64{{1, 5}, {7, 9}}},
		{"fill gap", [][2]int64{{1, 5}, {7, 9}, {6, 6}}, 16, [][2]int64{{1, 9}}},
		{"out of order", [][2]int64{{101, 200}, {1, 105}}, 16, [][2]int64{{1, 200}}},
		{"inside", [][2]int64{{1, 100}, {40, 50}}, 16, [][2]int64{{1, 100}}},
		{"spans several", [][2]int64{{1, 2}, {5, 6}, {9, 10}, {0, 20}}, 16, [][2]int64{{0, 20}}},
		{"empty ignored", [][2]int64{{5, 4}}, 16, nil},
		{"bound forgets lowest", [][2]int64{{1, 1}, {3, 3}, {5, 5}, {7, 7}}, 2, [][2]int64{{5, 5}, {7, 7}}},
	}
	for _, c := range cases {
		var s seqRanges
		for _, a := range c.add {
			s.add(a[0], a[1], c.max)
		}
		if got := s.intervals(); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

// TestSeqRangesCovers: only intervals entirely inside one stored interval
// are covered: the arrival-order hazard of a third region (101..200 stored
// from b before 1..105 from a) must not make 1..100 look stored.
func TestSeqRangesCovers(t *testing.T) {
	var s seqRanges
	s.add(101, 200, maxIdentRanges)
	for _, c := range []struct {
		lo, hi int64
		want   bool
	}{{1, 100, false}, {1, 105, false}, {100, 101, false}, {101, 101, true}, {150, 200, true}, {200, 201, false}, {5, 4, false}} {
		if got := s.covers(c.lo, c.hi); got != c.want {
			t.Errorf("covers(%d, %d) = %v, want %v", c.lo, c.hi, got, c.want)
		}
	}
	if s.highest() != 200 {
		t.Fatalf("highest %d", s.highest())
	}
}

// TestSeqRangesModel checks add and covers against a plain set of IDs,
// over random intervals (without the bound, which only forgets).
func TestSeqRangesModel(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for round := 0; round < 200; round++ {
		var s seqRanges
		model := map[int64]bool{}
		for k := 0; k < 20; k++ {
			lo := r.Int64N(100)
			hi := lo + r.Int64N(8) - 1
			s.add(lo, hi, 0)
			for x := lo; x <= hi; x++ {
				model[x] = true
			}
			for q := 0; q < 20; q++ {
				qlo := r.Int64N(110)
				qhi := qlo + r.Int64N(10)
				want := true
				for x := qlo; x <= qhi; x++ {
					want = want && model[x]
				}
				if got := s.covers(qlo, qhi); got != want {
					t.Fatalf("round %d: covers(%d, %d) = %v, want %v (set %v)", round, qlo, qhi, got, want, s.intervals())
				}
			}
		}
		iv := s.intervals()
		for i := 1; i < len(iv); i++ {
			if iv[i-1][1]+1 >= iv[i][0] {
				t.Fatalf("intervals not disjoint and apart: %v", iv)
			}
		}
	}
	// A bounded set forgets, never invents.
	var s seqRanges
	s.load([][2]int64{{1, 1}, {3, 3}, {5, 5}, {9, 2}}, 2)
	if s.covers(1, 1) || !s.covers(5, 5) || s.covers(9, 9) {
		t.Fatalf("bounded load: %v", s.intervals())
	}
}
