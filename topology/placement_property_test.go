package topology

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"pgregory.net/rapid"
)

// genTopology draws a small random topology: up to 3 regions, 4 racks per
// region name pool, 12 bookies, some read-only.
func genTopology(t *rapid.T) []BookieInfo {
	n := rapid.IntRange(0, 12).Draw(t, "bookies")
	nRegions := rapid.IntRange(1, 3).Draw(t, "regions")
	nRacks := rapid.IntRange(1, 4).Draw(t, "racks")
	out := make([]BookieInfo, n)
	for i := range out {
		region := fmt.Sprintf("g%d", rapid.IntRange(0, nRegions-1).Draw(t, "region"))
		rack := fmt.Sprintf("k%d", rapid.IntRange(0, nRacks-1).Draw(t, "rack"))
		out[i] = BookieInfo{
			ID: fmt.Sprintf("b%d", i), Address: fmt.Sprintf("127.0.0.1:%d", 4000+i),
			Region: region, Rack: rack,
			ReadOnly: rapid.IntRange(0, 7).Draw(t, "ro") == 0,
		}
	}
	// A duplicate candidate now and then: placement must not pick it twice.
	if n > 0 && rapid.Bool().Draw(t, "dup") {
		out = append(out, out[rapid.IntRange(0, n-1).Draw(t, "dupOf")])
	}
	return out
}

func genExclude(t *rapid.T, topo []BookieInfo) map[string]bool {
	ex := map[string]bool{}
	for _, b := range topo {
		if rapid.IntRange(0, 6).Draw(t, "ex") == 0 {
			ex[b.ID] = true
		}
	}
	return ex
}

// bruteSatisfiable answers, by trying every assignment of racks to the e
// positions, whether e bookies from the eligible ones can be arranged so
// that every cyclic window of w spans minRacks racks and minRegions regions.
// It shares no code with the policy.
func bruteSatisfiable(elig []BookieInfo, e, w, minRacks, minRegions int) bool {
	type rk struct{ region, rack string }
	caps := map[rk]int{}
	var racks []rk
	for _, b := range elig {
		k := rk{b.Region, b.Rack}
		if caps[k] == 0 {
			racks = append(racks, k)
		}
		caps[k]++
	}
	seq := make([]rk, e)
	used := map[rk]int{}
	var rec func(p int) bool
	rec = func(p int) bool {
		if p == e {
			for s := 0; s < e; s++ {
				rs, gs := map[rk]bool{}, map[string]bool{}
				for j := 0; j < w; j++ {
					x := seq[(s+j)%e]
					rs[x] = true
					gs[x.region] = true
				}
				if len(rs) < minRacks || len(gs) < minRegions {
					return false
				}
			}
			return true
		}
		for _, k := range racks {
			if used[k] < caps[k] {
				used[k]++
				seq[p] = k
				if rec(p + 1) {
					return true
				}
				used[k]--
			}
		}
		return false
	}
	return rec(0)
}

func eligibleRef(topo []BookieInfo, exclude map[string]bool, taken map[string]bool) []BookieInfo {
	var out []BookieInfo
	seen := map[string]bool{}
	for _, b := range topo {
		if !b.ReadOnly && !exclude[b.ID] && !taken[b.ID] && !seen[b.ID] {
			seen[b.ID] = true
			out = append(out, b)
		}
	}
	return out
}

type policyUnderTest struct {
	p                    Placement
	minRacks, minRegions int
	enforce              bool
}

func drawPolicy(t *rapid.T, regionAware bool) policyUnderTest {
	seed := rapid.Uint64().Draw(t, "seed")
	enforce := rapid.Bool().Draw(t, "enforce")
	if regionAware {
		cfg := DefaultRegionAwareConfig()
		cfg.MinRegionsPerWriteQuorum = rapid.IntRange(1, 3).Draw(t, "minRegions")
		cfg.MinRacksPerWriteQuorum = rapid.IntRange(1, 4).Draw(t, "minRacks")
		cfg.Enforce = enforce
		cfg.Rand = rand.NewPCG(seed, 2)
		p, err := NewRegionAwarePlacement(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return policyUnderTest{p: p, minRacks: cfg.MinRacksPerWriteQuorum, minRegions: cfg.MinRegionsPerWriteQuorum, enforce: enforce}
	}
	cfg := DefaultRackAwareConfig()
	cfg.MinRacksPerWriteQuorum = rapid.IntRange(1, 4).Draw(t, "minRacks")
	cfg.Enforce = enforce
	cfg.Rand = rand.NewPCG(seed, 2)
	p, err := NewRackAwarePlacement(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return policyUnderTest{p: p, minRacks: cfg.MinRacksPerWriteQuorum, enforce: enforce}
}

func testNewEnsembleProperty(t *rapid.T, regionAware bool) {
	pol := drawPolicy(t, regionAware)
	topo := genTopology(t)
	exclude := genExclude(t, topo)
	e := rapid.IntRange(1, 6).Draw(t, "E")
	w := rapid.IntRange(1, e).Draw(t, "Qw")
	a := rapid.IntRange(1, w).Draw(t, "Qa")

	ens, err := pol.p.NewEnsemble(e, w, a, topo, exclude)
	elig := eligibleRef(topo, exclude, nil)
	needRegions := min(pol.minRegions, w)
	needRacks := max(min(pol.minRacks, w), needRegions)
	// The strongest goal an enforcing policy must reach; a best-effort one
	// must reach it too whenever it is reachable.
	goalRegions := max(needRegions, 1)
	satisfiable := len(elig) >= e && bruteSatisfiable(elig, e, w, needRacks, goalRegions)

	if len(elig) < e {
		if !errors.Is(err, ErrNotEnoughBookies) {
			t.Fatalf("only %d eligible for E=%d: err = %v", len(elig), e, err)
		}
		return
	}
	if err != nil {
		if !errors.Is(err, ErrNotEnoughBookies) {
			t.Fatalf("unexpected error: %v", err)
		}
		if satisfiable {
			t.Fatalf("policy failed but a placement exists: %v", err)
		}
		enforcedRegions := regionAware && pol.enforce
		enforcedRacks := !regionAware && pol.enforce
		if !enforcedRegions && !enforcedRacks {
			t.Fatalf("best effort failed with %d eligible ≥ E=%d: %v", len(elig), e, err)
		}
		// The enforced constraint alone must be unsatisfiable.
		if enforcedRacks && bruteSatisfiable(elig, e, w, needRacks, 1) {
			t.Fatalf("enforced racks satisfiable but policy failed: %v", err)
		}
		if enforcedRegions && bruteSatisfiable(elig, e, w, needRegions, needRegions) {
			t.Fatalf("enforced regions satisfiable but policy failed: %v", err)
		}
		return
	}
	// Success: distinct, eligible, sized.
	if len(ens) != e {
		t.Fatalf("got %d bookies, want %d", len(ens), e)
	}
	seen := map[string]bool{}
	for _, b := range ens {
		if b.ReadOnly || exclude[b.ID] || seen[b.ID] {
			t.Fatalf("ineligible or duplicate %+v in %v", b, ids(ens))
		}
		seen[b.ID] = true
	}
	if satisfiable {
		if err := CheckEnsemble(ens, w, needRacks); err != nil {
			t.Fatalf("satisfiable but %v: %v", ids(ens), err)
		}
		if err := CheckEnsembleRegions(ens, w, goalRegions); err != nil {
			t.Fatalf("satisfiable but %v: %v", ids(ens), err)
		}
	} else if !pol.enforce {
		// Best effort reaches the first reachable goal in the documented
		// order: regions kept as high as possible, then racks.
		var goalR, goalG int
	search:
		for g := goalRegions; g >= 1; g-- {
			for r := needRacks; r >= g; r-- {
				if bruteSatisfiable(elig, e, w, r, g) {
					goalR, goalG = r, g
					break search
				}
			}
		}
		if goalR == 0 {
			t.Fatalf("brute force found no arrangement at all for %d eligible, E=%d", len(elig), e)
		}
		if err := CheckEnsemble(ens, w, goalR); err != nil {
			t.Fatalf("best effort below reachable %d racks/%d regions: %v: %v", goalR, goalG, ids(ens), err)
		}
		if err := CheckEnsembleRegions(ens, w, goalG); err != nil {
			t.Fatalf("best effort below reachable %d racks/%d regions: %v: %v", goalR, goalG, ids(ens), err)
		}
	} else {
		// Enforced constraint must still hold.
		if !regionAware {
			t.Fatalf("rack constraint unsatisfiable but enforce mode succeeded: %v", ids(ens))
		}
		if err := CheckEnsembleRegions(ens, w, needRegions); err != nil {
			t.Fatalf("enforced regions violated: %v: %v", ids(ens), err)
		}
	}
}

func TestPropertyRackAwareNewEnsemble(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) { testNewEnsembleProperty(t, false) })
}

func TestPropertyRegionAwareNewEnsemble(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) { testNewEnsembleProperty(t, true) })
}

// throughIndex returns the fewest racks and regions over the cyclic windows
// of w through index (independent of the policy's code).
func throughIndex(ens []BookieInfo, w, index int) (racks, regions int) {
	e := len(ens)
	racks, regions = 1<<30, 1<<30
	for s := 0; s < e; s++ {
		in := false
		rs, gs := map[string]bool{}, map[string]bool{}
		for j := 0; j < w; j++ {
			p := (s + j) % e
			in = in || p == index
			rs[ens[p].Region+"\x00"+ens[p].Rack] = true
			gs[ens[p].Region] = true
		}
		if in {
			racks, regions = min(racks, len(rs)), min(regions, len(gs))
		}
	}
	return racks, regions
}

func testReplaceProperty(t *rapid.T, regionAware bool) {
	pol := drawPolicy(t, regionAware)
	topo := genTopology(t)
	if len(topo) == 0 {
		return
	}
	// Any distinct bookies form the current ensemble (it may already be
	// badly placed, and members may have turned read-only).
	perm := rapid.Permutation(topo).Draw(t, "perm")
	var ens []BookieInfo
	seen := map[string]bool{}
	for _, b := range perm {
		if !seen[b.ID] {
			seen[b.ID] = true
			ens = append(ens, b)
		}
	}
	ens = ens[:rapid.IntRange(1, min(len(ens), 6)).Draw(t, "E")]
	e := len(ens)
	w := rapid.IntRange(1, e).Draw(t, "Qw")
	index := rapid.IntRange(0, e-1).Draw(t, "index")
	exclude := genExclude(t, topo)

	got, err := pol.p.ReplaceBookie(ens, w, index, topo, exclude)
	taken := map[string]bool{}
	for _, b := range ens {
		taken[b.ID] = true
	}
	elig := eligibleRef(topo, exclude, taken)
	needRegions := max(min(pol.minRegions, w), 1)
	needRacks := max(min(pol.minRacks, w), needRegions)
	// Best reachable spread with any single eligible candidate.
	ok, okEnforced := false, false
	trial := append([]BookieInfo(nil), ens...)
	for _, c := range elig {
		trial[index] = c
		r, g := throughIndex(trial, w, index)
		ok = ok || (r >= needRacks && g >= needRegions)
		if regionAware {
			okEnforced = okEnforced || g >= needRegions
		} else {
			okEnforced = okEnforced || r >= needRacks
		}
	}
	if len(elig) == 0 {
		if !errors.Is(err, ErrNotEnoughBookies) {
			t.Fatalf("no eligible candidate: err = %v", err)
		}
		return
	}
	if err != nil {
		if !errors.Is(err, ErrNotEnoughBookies) || !pol.enforce || okEnforced {
			t.Fatalf("err = %v (enforce=%v, satisfiable=%v)", err, pol.enforce, okEnforced)
		}
		return
	}
	if taken[got.ID] || got.ReadOnly || exclude[got.ID] {
		t.Fatalf("ineligible replacement %+v", got)
	}
	found := false
	for _, c := range elig {
		found = found || c.ID == got.ID
	}
	if !found {
		t.Fatalf("replacement %+v is not a candidate", got)
	}
	trial[index] = got
	r, g := throughIndex(trial, w, index)
	if ok && (r < needRacks || g < needRegions) {
		t.Fatalf("satisfiable, but replacement %s gives %d racks %d regions (need %d/%d)", got.ID, r, g, needRacks, needRegions)
	}
	if pol.enforce && regionAware && g < needRegions {
		t.Fatalf("enforced regions violated")
	}
	if pol.enforce && !regionAware && r < needRacks {
		t.Fatalf("enforced racks violated")
	}
}

func TestPropertyRackAwareReplaceBookie(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) { testReplaceProperty(t, false) })
}

func TestPropertyRegionAwareReplaceBookie(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) { testReplaceProperty(t, true) })
}
