package topology

import (
	"errors"
	"sort"
)

// errSearchBudget: the arrangement search ran out of steps. Callers treat it
// like an unsatisfiable constraint (and say so in the error text).
var errSearchBudget = errors.New("search budget exhausted")

// spreadGoal is what one arrangement must achieve: every cyclic window of w
// consecutive positions spans at least minRacks racks and minRegions regions
// (both already capped at w; ≤ 1 means no constraint).
type spreadGoal struct {
	e, w                 int
	minRacks, minRegions int
}

// rackGroup is one rack (RackKey) with its eligible bookies, shuffled.
type rackGroup struct {
	region  int
	members []BookieInfo
}

// topoView groups eligible bookies by rack and region.
type topoView struct {
	groups   []rackGroup
	nRegions int
}

// newTopoView groups bookies; perm (a permutation of len(bookies)) decides
// the order of members inside a rack so equal choices are random.
func newTopoView(bookies []BookieInfo, perm []int) topoView {
	var v topoView
	rackIdx := map[string]int{}
	regionIdx := map[string]int{}
	for _, i := range perm {
		b := bookies[i]
		r, ok := regionIdx[b.Region]
		if !ok {
			r = len(regionIdx)
			regionIdx[b.Region] = r
		}
		g, ok := rackIdx[RackKey(b)]
		if !ok {
			g = len(v.groups)
			rackIdx[RackKey(b)] = g
			v.groups = append(v.groups, rackGroup{region: r})
		}
		v.groups[g].members = append(v.groups[g].members, b)
	}
	v.nRegions = len(regionIdx)
	return v
}

// regionCaps returns the number of eligible bookies per region.
func (v topoView) regionCaps() []int {
	caps := make([]int, v.nRegions)
	for _, g := range v.groups {
		caps[g.region] += len(g.members)
	}
	return caps
}

func (v topoView) rackCaps() []int {
	caps := make([]int, len(v.groups))
	for i, g := range v.groups {
		caps[i] = len(g.members)
	}
	return caps
}

// coverageBound is a necessary condition for every window of w (out of e,
// cyclic) to span m domains with at most caps[i] positions per domain: a
// domain used n times lies in at most min(e, n·w) windows, every window
// needs m domains, and the most even use (water-filling) maximises the sum.
func coverageBound(caps []int, e, w, m int) bool {
	if m <= 1 {
		return true
	}
	if len(caps) < m {
		return false
	}
	n := waterFill(caps, e)
	total := 0
	for _, x := range n {
		total += min(e, x*w)
	}
	return total >= m*e
}

// waterFill spreads e units over domains as evenly as the caps allow.
func waterFill(caps []int, e int) []int {
	n := make([]int, len(caps))
	for placed := 0; placed < e; {
		progress := false
		for i := range n {
			if placed == e {
				break
			}
			if n[i] < caps[i] {
				n[i]++
				placed++
				progress = true
			}
		}
		if !progress {
			break
		}
	}
	return n
}

// arrange searches for a sequence of racks meeting goal and returns the
// ensemble, or nil if none exists (or errSearchBudget). budget is the
// number of search steps left; arrange subtracts what it spends, but
// always allows e steps so a goal with no backtracking still completes.
func arrange(v topoView, goal spreadGoal, budget *int) ([]BookieInfo, error) {
	total := 0
	for _, g := range v.groups {
		total += len(g.members)
	}
	if total < goal.e {
		return nil, nil
	}
	if !coverageBound(v.rackCaps(), goal.e, goal.w, goal.minRacks) ||
		!coverageBound(v.regionCaps(), goal.e, goal.w, goal.minRegions) {
		return nil, nil
	}
	s := &solver{
		v: v, goal: goal, budget: max(*budget, goal.e),
		seq:        make([]int, goal.e),
		used:       make([]int, len(v.groups)),
		regionUsed: make([]int, v.nRegions),
		rackMark:   make([]int, len(v.groups)),
		regionMark: make([]int, v.nRegions),
		regionCap:  v.regionCaps(),
	}
	ok, err := s.dfs(0)
	*budget = max(0, *budget-s.steps)
	if err != nil || !ok {
		return nil, err
	}
	out := make([]BookieInfo, goal.e)
	next := make([]int, len(v.groups))
	for p, g := range s.seq {
		out[p] = v.groups[g].members[next[g]]
		next[g]++
	}
	return out, nil
}

// solver is a depth-first search over rack sequences with pruning: a
// position is filled only if every window through it can still reach its
// spread. Racks are tried best first (no neighbour in the same rack or
// region, least used, most spare bookies, then random), so realistic
// requests succeed without backtracking; unused racks that are
// interchangeable (same region, same size) are tried once.
type solver struct {
	v          topoView
	goal       spreadGoal
	budget     int
	steps      int
	seq        []int // seq[0:p] is filled
	used       []int // per rack
	regionUsed []int
	regionCap  []int
	// stamp marks for counting distinct racks/regions in a window.
	stamp      int
	rackMark   []int
	regionMark []int
}

func (s *solver) dfs(p int) (bool, error) {
	if p == s.goal.e {
		return true, nil
	}
	s.steps++
	if s.steps > s.budget {
		return false, errSearchBudget
	}
	for _, g := range s.order(p) {
		s.seq[p] = g
		s.used[g]++
		s.regionUsed[s.v.groups[g].region]++
		if s.windowsOK(p) {
			ok, err := s.dfs(p + 1)
			if ok || err != nil {
				return ok, err
			}
		}
		s.used[g]--
		s.regionUsed[s.v.groups[g].region]--
	}
	return false, nil
}

// windowsOK checks every window containing position p, with seq[0:p+1]
// filled: distinct domains so far plus unfilled slots must reach the goal.
func (s *solver) windowsOK(p int) bool {
	e, w := s.goal.e, s.goal.w
	starts := w
	if w == e {
		starts = 1 // all windows are the whole ensemble
	}
	for k := 0; k < starts; k++ {
		st := (p - k + e) % e
		s.stamp++
		racks, regions, open := 0, 0, 0
		for j := 0; j < w; j++ {
			pos := (st + j) % e
			if pos > p {
				open++
				continue
			}
			g := s.seq[pos]
			if s.rackMark[g] != s.stamp {
				s.rackMark[g] = s.stamp
				racks++
			}
			r := s.v.groups[g].region
			if s.regionMark[r] != s.stamp {
				s.regionMark[r] = s.stamp
				regions++
			}
		}
		if open == 0 {
			if racks < s.goal.minRacks || regions < s.goal.minRegions {
				return false
			}
			continue
		}
		// Open slots can only add racks (regions) that still have spare
		// bookies and are not yet in the window.
		if racks+min(open, s.spareRacksOutside()) < s.goal.minRacks ||
			regions+min(open, s.spareRegionsOutside()) < s.goal.minRegions {
			return false
		}
	}
	return true
}

// spareRacksOutside counts racks with spare bookies not marked in the
// current window (stamp).
func (s *solver) spareRacksOutside() int {
	n := 0
	for g, grp := range s.v.groups {
		if s.rackMark[g] != s.stamp && s.used[g] < len(grp.members) {
			n++
		}
	}
	return n
}

func (s *solver) spareRegionsOutside() int {
	n := 0
	for r, c := range s.regionCap {
		if s.regionMark[r] != s.stamp && s.regionUsed[r] < c {
			n++
		}
	}
	return n
}

// order lists the racks that may take position p, best first.
func (s *solver) order(p int) []int {
	e, w := s.goal.e, s.goal.w
	rackNear := make([]int, len(s.v.groups))
	regionNear := make([]int, s.v.nRegions)
	for k := 1; k < w; k++ {
		for _, pos := range [2]int{(p - k + e) % e, (p + k) % e} {
			if pos < p { // filled
				g := s.seq[pos]
				rackNear[g]++
				regionNear[s.v.groups[g].region]++
			}
		}
	}
	type cand struct{ g, k1, k2, k3, k4, k5 int }
	cands := make([]cand, 0, len(s.v.groups))
	type sym struct{ region, size int }
	seenUnused := map[sym]bool{}
	for g, grp := range s.v.groups {
		if s.used[g] >= len(grp.members) {
			continue
		}
		if s.used[g] == 0 {
			k := sym{grp.region, len(grp.members)}
			if seenUnused[k] {
				continue
			}
			seenUnused[k] = true
		}
		c := cand{g: g, k1: rackNear[g], k2: regionNear[grp.region], k3: s.regionUsed[grp.region], k4: s.used[g], k5: -(len(grp.members) - s.used[g])}
		if s.goal.minRegions > 1 {
			c.k1, c.k2 = c.k2, c.k1 // region spread first
		} else {
			c.k2, c.k3 = 0, 0
		}
		cands = append(cands, c)
	}
	// Groups are numbered in a random order (newTopoView takes a random
	// permutation), so the group number is a random tie-break, and keeping
	// the first of interchangeable unused racks above is a random choice.
	sort.Slice(cands, func(i, j int) bool {
		a, b := cands[i], cands[j]
		switch {
		case a.k1 != b.k1:
			return a.k1 < b.k1
		case a.k2 != b.k2:
			return a.k2 < b.k2
		case a.k3 != b.k3:
			return a.k3 < b.k3
		case a.k4 != b.k4:
			return a.k4 < b.k4
		case a.k5 != b.k5:
			return a.k5 < b.k5
		}
		return a.g < b.g
	})
	out := make([]int, len(cands))
	for i, c := range cands {
		out[i] = c.g
	}
	return out
}
