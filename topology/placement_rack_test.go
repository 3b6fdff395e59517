package topology

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// bookies builds a topology from "region/rack:count" specs; IDs are
// region-rack-n. A trailing "!ro" marks the rack's bookies read-only.
func bookies(specs ...string) []BookieInfo {
	var out []BookieInfo
	for _, s := range specs {
		ro := strings.HasSuffix(s, "!ro")
		s = strings.TrimSuffix(s, "!ro")
		var region, rack string
		var n int
		head, count, _ := strings.Cut(s, ":")
		region, rack, _ = strings.Cut(head, "/")
		fmt.Sscan(count, &n)
		for i := 0; i < n; i++ {
			id := fmt.Sprintf("%s-%s-%d", region, rack, i)
			out = append(out, BookieInfo{ID: id, Address: id + ":3181", Region: region, Rack: rack, ReadOnly: ro})
		}
	}
	return out
}

func newRack(t *testing.T, minRacks int, enforce bool, reg prometheus.Registerer, seed uint64) *RackAware {
	t.Helper()
	cfg := DefaultRackAwareConfig()
	cfg.MinRacksPerWriteQuorum = minRacks
	cfg.Enforce = enforce
	cfg.Registerer = reg
	cfg.Rand = rand.NewPCG(seed, 1)
	p, err := NewRackAwarePlacement(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// checkChosen asserts the invariants every returned ensemble has.
func checkChosen(t *testing.T, ens []BookieInfo, e int, exclude map[string]bool) {
	t.Helper()
	if len(ens) != e {
		t.Fatalf("ensemble size %d, want %d", len(ens), e)
	}
	seen := map[string]bool{}
	for _, b := range ens {
		if b.ReadOnly || exclude[b.ID] || seen[b.ID] {
			t.Fatalf("bad member %+v (read-only, excluded or duplicate) in %v", b, ids(ens))
		}
		seen[b.ID] = true
	}
}

func ids(ens []BookieInfo) []string {
	out := make([]string, len(ens))
	for i, b := range ens {
		out[i] = b.ID
	}
	return out
}

func TestRackAwareNewEnsemble(t *testing.T) {
	tests := []struct {
		name      string
		topo      []BookieInfo
		e, w, a   int
		minRacks  int
		enforce   bool
		exclude   []string
		wantErr   error
		wantRacks int // every write quorum spans at least this many racks
		degraded  bool
	}{
		{name: "3 racks E3 Qw3", topo: bookies("r/a:3", "r/b:3", "r/c:3"), e: 3, w: 3, a: 2, minRacks: 3, enforce: true, wantRacks: 3},
		{name: "2 racks E4 Qw2 alternates", topo: bookies("r/a:3", "r/b:3"), e: 4, w: 2, a: 2, minRacks: 2, enforce: true, wantRacks: 2},
		// An odd cycle cannot alternate between two racks: the wrapping quorum repeats one.
		{name: "2 racks E5 Qw2 odd cycle", topo: bookies("r/a:3", "r/b:3"), e: 5, w: 2, a: 2, minRacks: 2, enforce: true, wantErr: ErrNotEnoughBookies},
		{name: "3 racks E5 Qw2", topo: bookies("r/a:3", "r/b:3", "r/c:1"), e: 5, w: 2, a: 2, minRacks: 2, enforce: true, wantRacks: 2},
		{name: "skewed racks E5 Qw3", topo: bookies("r/a:10", "r/b:2"), e: 5, w: 3, a: 2, minRacks: 2, enforce: true, wantRacks: 2},
		{name: "skewed racks E5 Qw2 unsatisfiable enforce", topo: bookies("r/a:10", "r/b:1"), e: 5, w: 2, a: 1, minRacks: 2, enforce: true, wantErr: ErrNotEnoughBookies},
		{name: "skewed racks E5 Qw2 best effort", topo: bookies("r/a:10", "r/b:1"), e: 5, w: 2, a: 1, minRacks: 2, wantRacks: 1, degraded: true},
		{name: "one rack enforce", topo: bookies("r/a:5"), e: 3, w: 2, a: 2, minRacks: 2, enforce: true, wantErr: ErrNotEnoughBookies},
		{name: "one rack best effort", topo: bookies("r/a:5"), e: 3, w: 2, a: 2, minRacks: 2, wantRacks: 1, degraded: true},
		{name: "Qw1 needs one rack", topo: bookies("r/a:5"), e: 3, w: 1, a: 1, minRacks: 2, enforce: true, wantRacks: 1},
		{name: "read-only rack ignored", topo: bookies("r/a:3", "r/b:3!ro"), e: 3, w: 2, a: 2, minRacks: 2, enforce: true, wantErr: ErrNotEnoughBookies},
		{name: "excluded rack ignored", topo: bookies("r/a:3", "r/b:1", "r/c:3"), e: 3, w: 3, a: 2, minRacks: 3, enforce: true, exclude: []string{"r-b-0"}, wantErr: ErrNotEnoughBookies},
		{name: "too few bookies", topo: bookies("r/a:1", "r/b:1"), e: 3, w: 2, a: 2, minRacks: 2, wantErr: ErrNotEnoughBookies},
		{name: "same rack name in two regions is two racks", topo: bookies("x/a:2", "y/a:2"), e: 4, w: 2, a: 2, minRacks: 2, enforce: true, wantRacks: 2},
		{name: "bad E", topo: bookies("r/a:3"), e: 0, w: 0, a: 0, minRacks: 2, wantErr: ErrInvalidArgument},
		{name: "Qw > E", topo: bookies("r/a:3"), e: 2, w: 3, a: 1, minRacks: 2, wantErr: ErrInvalidArgument},
		{name: "Qa > Qw", topo: bookies("r/a:3"), e: 3, w: 2, a: 3, minRacks: 2, wantErr: ErrInvalidArgument},
		{name: "Qa 0", topo: bookies("r/a:3"), e: 3, w: 2, a: 0, minRacks: 2, wantErr: ErrInvalidArgument},
		{name: "E too large", topo: bookies("r/a:3"), e: MaxEnsembleSize + 1, w: 2, a: 1, minRacks: 2, wantErr: ErrInvalidArgument},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			p := newRack(t, tc.minRacks, tc.enforce, reg, 7)
			exclude := map[string]bool{}
			for _, id := range tc.exclude {
				exclude[id] = true
			}
			ens, err := p.NewEnsemble(tc.e, tc.w, tc.a, tc.topo, exclude)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("err = %v, want %v", err, tc.wantErr)
				}
				t.Logf("error text: %v", err)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			checkChosen(t, ens, tc.e, exclude)
			if err := CheckEnsemble(ens, tc.w, tc.wantRacks); err != nil {
				t.Fatalf("%v: %v", ids(ens), err)
			}
			failures := counterValue(t, p.p.metrics.adherenceFailures.WithLabelValues("rack_aware", "racks"))
			if tc.degraded != (failures > 0) {
				t.Fatalf("adherence failures = %v, degraded = %v", failures, tc.degraded)
			}
		})
	}
}

func TestRackAwareErrorNamesNumbers(t *testing.T) {
	p := newRack(t, 2, true, nil, 1)
	_, err := p.NewEnsemble(3, 2, 2, bookies("r/a:5"), nil)
	if !errors.Is(err, ErrNotEnoughBookies) || !strings.Contains(err.Error(), "must span 2 racks") || !strings.Contains(err.Error(), "in 1 racks") {
		t.Fatalf("err = %v", err)
	}
	_, err = p.NewEnsemble(3, 4, 2, bookies("r/a:5"), nil)
	if !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "writeQuorum 4") {
		t.Fatalf("err = %v", err)
	}
	_, err = p.NewEnsemble(1, 1, 1, []BookieInfo{{ID: ""}}, nil)
	if !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "candidates[0].ID") {
		t.Fatalf("err = %v", err)
	}
}

func TestRackAwareSpreadsEvenly(t *testing.T) {
	p := newRack(t, 2, true, nil, 3)
	ens, err := p.NewEnsemble(6, 2, 2, bookies("r/a:6", "r/b:6", "r/c:6"), nil)
	if err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	for _, b := range ens {
		count[b.Rack]++
	}
	for _, r := range []string{"a", "b", "c"} {
		if count[r] != 2 {
			t.Fatalf("rack use %v, want 2 each: %v", count, ids(ens))
		}
	}
}

func TestRackAwareRandomizes(t *testing.T) {
	p := newRack(t, 2, true, nil, 11)
	topo := bookies("r/a:4", "r/b:4", "r/c:4")
	chosen := map[string]int{}
	for i := 0; i < 200; i++ {
		ens, err := p.NewEnsemble(3, 2, 2, topo, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range ens {
			chosen[b.ID]++
		}
	}
	if len(chosen) != len(topo) {
		t.Fatalf("only %d of %d bookies ever chosen: %v", len(chosen), len(topo), chosen)
	}
	for id, n := range chosen {
		// 600 picks over 12 bookies: 50 on average.
		if n < 20 {
			t.Fatalf("bookie %s chosen %d times of 600: load not spread (%v)", id, n, chosen)
		}
	}
}

func TestRackAwareReplaceBookie(t *testing.T) {
	topo := bookies("r/a:3", "r/b:3", "r/c:1")
	p := newRack(t, 2, true, nil, 5)
	ens := []BookieInfo{topo[0], topo[3], topo[1], topo[4]} // a b a b
	// Replace position 1 (rack b): the quorums (0,1) and (1,2) are a,?,a, so
	// the replacement must not be rack a.
	for i := 0; i < 50; i++ {
		got, err := p.ReplaceBookie(ens, 2, 1, topo, map[string]bool{})
		if err != nil {
			t.Fatal(err)
		}
		if got.Rack == "a" || got.ID == topo[3].ID || got.ID == topo[4].ID {
			t.Fatalf("bad replacement %+v", got)
		}
		next := append([]BookieInfo(nil), ens...)
		next[1] = got
		if err := CheckEnsemble(next, 2, 2); err != nil {
			t.Fatal(err)
		}
	}
	// Exclude every non-a candidate: enforce fails, best effort degrades.
	excl := map[string]bool{"r-b-2": true, "r-c-0": true}
	if _, err := p.ReplaceBookie(ens, 2, 1, topo, excl); !errors.Is(err, ErrNotEnoughBookies) {
		t.Fatalf("err = %v, want ErrNotEnoughBookies", err)
	}
	reg := prometheus.NewRegistry()
	be := newRack(t, 2, false, reg, 5)
	got, err := be.ReplaceBookie(ens, 2, 1, topo, excl)
	if err != nil || got.Rack != "a" {
		t.Fatalf("best effort got %+v, %v", got, err)
	}
	if n := counterValue(t, be.p.metrics.adherenceFailures.WithLabelValues("rack_aware", "racks")); n != 1 {
		t.Fatalf("adherence failures = %v, want 1", n)
	}
	// Bad arguments.
	for _, tc := range []struct {
		w, idx int
		want   string
	}{{0, 0, "writeQuorum 0"}, {5, 0, "writeQuorum 5"}, {2, 4, "index 4"}, {2, -1, "index -1"}} {
		if _, err := p.ReplaceBookie(ens, tc.w, tc.idx, topo, nil); !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("w=%d idx=%d: err = %v", tc.w, tc.idx, err)
		}
	}
	if _, err := p.ReplaceBookie(ens, 2, 0, ens, nil); !errors.Is(err, ErrNotEnoughBookies) {
		t.Fatalf("only ensemble members as candidates: err = %v", err)
	}
}

func TestCheckEnsemble(t *testing.T) {
	topo := bookies("r/a:2", "r/b:2")
	a0, a1, b0, b1 := topo[0], topo[1], topo[2], topo[3]
	if err := CheckEnsemble([]BookieInfo{a0, b0, a1, b1}, 2, 2); err != nil {
		t.Fatal(err)
	}
	// Wrapping quorum (b1, a0) is fine; (a0, a1) is not.
	err := CheckEnsemble([]BookieInfo{a0, a1, b0, b1}, 2, 2)
	if !errors.Is(err, ErrPlacementViolation) || !strings.Contains(err.Error(), "position 0") {
		t.Fatalf("err = %v", err)
	}
	// The wrapping quorum (position 3, 0) is checked.
	err = CheckEnsemble([]BookieInfo{a0, b0, b1, a1}, 2, 2)
	if !errors.Is(err, ErrPlacementViolation) || !strings.Contains(err.Error(), "position 1") {
		t.Fatalf("err = %v", err)
	}
	err = CheckEnsemble([]BookieInfo{a0, b0, a1, a1}, 2, 1)
	if !errors.Is(err, ErrPlacementViolation) || !strings.Contains(err.Error(), "positions 2 and 3") {
		t.Fatalf("duplicate: err = %v", err)
	}
	if err := CheckEnsemble([]BookieInfo{a0, b0}, 3, 2); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("err = %v", err)
	}
	if err := CheckEnsembleRegions([]BookieInfo{a0, b0}, 2, 2); !errors.Is(err, ErrPlacementViolation) {
		t.Fatalf("regions: err = %v", err)
	}
}

func TestConfigValidate(t *testing.T) {
	c := DefaultRackAwareConfig()
	c.MinRacksPerWriteQuorum = 0
	if _, err := NewRackAwarePlacement(c); !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "MinRacksPerWriteQuorum") {
		t.Fatalf("err = %v", err)
	}
	r := DefaultRegionAwareConfig()
	r.MinRegionsPerWriteQuorum = 0
	if _, err := NewRegionAwarePlacement(r); !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "MinRegionsPerWriteQuorum") {
		t.Fatalf("err = %v", err)
	}
	// Two policies on one registry share the metrics.
	reg := prometheus.NewRegistry()
	c = DefaultRackAwareConfig()
	c.Registerer = reg
	if _, err := NewRackAwarePlacement(c); err != nil {
		t.Fatal(err)
	}
	r = DefaultRegionAwareConfig()
	r.Registerer = reg
	if _, err := NewRegionAwarePlacement(r); err != nil {
		t.Fatal(err)
	}
}

func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// TestPlacementLargeTopologies checks that big requests finish quickly and
// stay correct (no brute-force reference at this size).
func TestPlacementLargeTopologies(t *testing.T) {
	r := rand.New(rand.NewPCG(42, 42))
	rack := newRack(t, 3, false, nil, 1)
	region := newRegion(t, 2, 3, false, nil)
	var slowest time.Duration
	for i := 0; i < 200; i++ {
		var topo []BookieInfo
		nRacks := 1 + r.IntN(20)
		for j := 0; j < 1+r.IntN(200); j++ {
			topo = append(topo, BookieInfo{
				ID:     fmt.Sprintf("b%d", j),
				Region: fmt.Sprintf("g%d", r.IntN(3)), Rack: fmt.Sprintf("k%d", r.IntN(nRacks)),
				ReadOnly: r.IntN(10) == 0,
			})
		}
		e := 1 + r.IntN(min(len(topo), MaxEnsembleSize))
		w := 1 + r.IntN(e)
		for _, p := range []Placement{rack, region} {
			start := time.Now()
			ens, err := p.NewEnsemble(e, w, 1, topo, nil)
			slowest = max(slowest, time.Since(start))
			if err != nil {
				if !errors.Is(err, ErrNotEnoughBookies) {
					t.Fatal(err)
				}
				continue
			}
			checkChosen(t, ens, e, nil)
		}
	}
	t.Logf("slowest placement: %v", slowest)
	if slowest > 5*time.Second {
		t.Fatalf("placement took %v", slowest)
	}
}

// TestPlacementSearchIsBounded draws hard enforce-mode requests (wide write
// quorums, many racks required) and checks each call ends quickly, whether
// it finds an ensemble or gives up.
func TestPlacementSearchIsBounded(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var slowest time.Duration
	for i := 0; i < 300; i++ {
		var topo []BookieInfo
		nr := 1 + r.IntN(8)
		for k := 0; k < nr; k++ {
			for j := 0; j < 1+r.IntN(12); j++ {
				topo = append(topo, BookieInfo{ID: fmt.Sprintf("r%d-%d", k, j), Rack: fmt.Sprintf("r%d", k), Region: fmt.Sprintf("g%d", k%3)})
			}
		}
		e := 1 + r.IntN(min(len(topo), 40))
		w := 1 + r.IntN(e)
		m := 1 + r.IntN(w)
		var p Placement = newRack(t, m, true, nil, uint64(i))
		if r.IntN(2) == 0 {
			p = newRegion(t, 1+r.IntN(3), m, true, nil)
		}
		start := time.Now()
		ens, err := p.NewEnsemble(e, w, 1, topo, nil)
		slowest = max(slowest, time.Since(start))
		if err != nil {
			if !errors.Is(err, ErrNotEnoughBookies) {
				t.Fatal(err)
			}
			continue
		}
		checkChosen(t, ens, e, nil)
		if rp, ok := p.(*RackAware); ok {
			if err := CheckEnsemble(ens, w, m); err != nil {
				t.Fatalf("enforce mode returned a violating ensemble: %v (%v)", err, rp)
			}
		}
	}
	t.Logf("slowest placement: %v", slowest)
	if slowest > 10*time.Second {
		t.Fatalf("a placement call took %v", slowest)
	}
}
