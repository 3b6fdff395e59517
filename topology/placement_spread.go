package topology

import (
	"fmt"
	"log/slog"
	"math/rand/v2"

	"github.com/prometheus/client_golang/prometheus"
)

// spreadPolicy is the engine behind RackAware and RegionAware: it spreads
// every write quorum over at least minRacks racks and minRegions regions,
// failing or degrading per constraint.
type spreadPolicy struct {
	name                         string // metric label
	minRacks, minRegions         int
	enforceRacks, enforceRegions bool
	budget                       int
	rnd                          *lockedRand
	log                          *slog.Logger
	metrics                      *placementMetrics
}

func newSpreadPolicy(name string, minRacks, minRegions int, enforceRacks, enforceRegions bool,
	budget int, src rand.Source, reg prometheus.Registerer, log *slog.Logger) (*spreadPolicy, error) {
	m, err := newPlacementMetrics(reg)
	if err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &spreadPolicy{
		name: name, minRacks: minRacks, minRegions: minRegions,
		enforceRacks: enforceRacks, enforceRegions: enforceRegions,
		budget: budget, rnd: newLockedRand(src),
		log:     log.With("policy", name),
		metrics: m,
	}, nil
}

// goals lists the spreads to try, best first: the configured one, then (for
// constraints not enforced) weaker ones, racks relaxed before regions.
func (p *spreadPolicy) goals(e, w int) []spreadGoal {
	wantRegions := max(1, min(p.minRegions, w))
	// Spanning R regions means spanning R racks; when regions must be
	// relaxed, keep that rack spread if the racks allow it.
	wantRacks := max(min(p.minRacks, w), wantRegions)
	lowRacks, lowRegions := 1, 1
	if p.enforceRacks {
		lowRacks = wantRacks
	}
	if p.enforceRegions {
		lowRegions = wantRegions
	}
	var out []spreadGoal
	for reg := wantRegions; reg >= lowRegions; reg-- {
		for rk := wantRacks; rk >= lowRacks; rk-- {
			out = append(out, spreadGoal{e: e, w: w, minRacks: max(rk, reg), minRegions: reg})
			if rk <= reg {
				break // racks ≥ regions always; lower rack goals are the same goal
			}
		}
	}
	return out
}

// newEnsemble implements Placement.NewEnsemble.
func (p *spreadPolicy) newEnsemble(e, w, a int, candidates []BookieInfo, exclude map[string]bool) ([]BookieInfo, error) {
	if err := validateQuorums(e, w, a); err != nil {
		return nil, err
	}
	elig, err := eligible(candidates, exclude, nil)
	if err != nil {
		return nil, err
	}
	if len(elig) < e {
		p.metrics.errors.WithLabelValues(p.name).Inc()
		return nil, fmt.Errorf("%w: ensemble of %d needs %d writable, non-excluded bookies, found %d (of %d candidates)",
			ErrNotEnoughBookies, e, e, len(elig), len(candidates))
	}
	view := newTopoView(elig, p.rnd.perm(len(elig)))
	goals := p.goals(e, w)
	var budgetHit bool
	budget := p.budget // shared by all goals: bounds the time of one call
	for i, g := range goals {
		ens, err := arrange(view, g, &budget)
		if err != nil {
			budgetHit = true
			continue
		}
		if ens == nil {
			continue
		}
		if i > 0 {
			p.reportDegraded("new", goals[0], g, e, w)
		}
		p.metrics.ensembles.WithLabelValues(p.name, "new").Inc()
		return ens, nil
	}
	p.metrics.errors.WithLabelValues(p.name).Inc()
	note := ""
	if budgetHit {
		note = fmt.Sprintf(" (search gave up after %d steps)", p.budget)
	}
	g := goals[len(goals)-1]
	if note == "" && len(view.groups) >= g.minRacks && view.nRegions >= g.minRegions {
		note = " (enough racks, but their sizes do not allow every write quorum to be spread)"
	}
	return nil, fmt.Errorf("%w: every write quorum of %d (ensemble %d) must span %s; found %d writable bookies in %s%s",
		ErrNotEnoughBookies, w, e, p.spreadText(g.minRacks, g.minRegions), len(elig),
		p.spreadText(len(view.groups), view.nRegions), note)
}

// spreadText formats rack and region counts, leaving regions out for a
// policy that has no region constraint.
func (p *spreadPolicy) spreadText(racks, regions int) string {
	if p.minRegions <= 1 {
		return fmt.Sprintf("%d racks", racks)
	}
	return fmt.Sprintf("%d racks and %d regions", racks, regions)
}

func (p *spreadPolicy) reportDegraded(op string, want, got spreadGoal, e, w int) {
	if got.minRacks < want.minRacks {
		p.metrics.adherenceFailures.WithLabelValues(p.name, "racks").Inc()
	}
	if got.minRegions < want.minRegions {
		p.metrics.adherenceFailures.WithLabelValues(p.name, "regions").Inc()
	}
	p.log.Warn("placement degraded: too few racks or regions for the configured spread",
		"op", op, "ensemble", e, "write_quorum", w,
		"want_racks", want.minRacks, "got_racks", got.minRacks,
		"want_regions", want.minRegions, "got_regions", got.minRegions)
}

// replaceBookie implements Placement.ReplaceBookie.
func (p *spreadPolicy) replaceBookie(ensemble []BookieInfo, w, index int, candidates []BookieInfo, exclude map[string]bool) (BookieInfo, error) {
	e := len(ensemble)
	switch {
	case e < 1 || e > MaxEnsembleSize:
		return BookieInfo{}, fmt.Errorf("%w: len(ensemble) %d must be in [1, %d]", ErrInvalidArgument, e, MaxEnsembleSize)
	case w < 1 || w > e:
		return BookieInfo{}, fmt.Errorf("%w: writeQuorum %d must be in [1, len(ensemble)=%d]", ErrInvalidArgument, w, e)
	case index < 0 || index >= e:
		return BookieInfo{}, fmt.Errorf("%w: index %d must be in [0, len(ensemble)=%d)", ErrInvalidArgument, index, e)
	}
	taken := make(map[string]bool, e)
	for _, b := range ensemble {
		taken[b.ID] = true
	}
	elig, err := eligible(candidates, exclude, taken)
	if err != nil {
		return BookieInfo{}, err
	}
	if len(elig) == 0 {
		p.metrics.errors.WithLabelValues(p.name).Inc()
		return BookieInfo{}, fmt.Errorf("%w: replacing position %d needs 1 writable bookie outside the ensemble and not excluded, found 0 (of %d candidates)",
			ErrNotEnoughBookies, index, len(candidates))
	}
	wantRacks, wantRegions := min(p.minRacks, w), min(p.minRegions, w)
	wantRacks = max(wantRacks, wantRegions)

	// Count how often each rack and region appears elsewhere in the
	// ensemble: among acceptable choices, the least represented wins.
	rackCount, regionCount := map[string]int{}, map[string]int{}
	for i, b := range ensemble {
		if i != index {
			rackCount[RackKey(b)]++
			regionCount[b.Region]++
		}
	}
	trial := make([]BookieInfo, e)
	copy(trial, ensemble)
	type scored struct {
		b               BookieInfo
		racks, regions  int // worst spread over the windows through index, capped at the goal
		rackUse, regUse int
		tie             int
	}
	perm := p.rnd.perm(len(elig))
	best := scored{racks: -1}
	for i, c := range elig {
		trial[index] = c
		racks, regions := windowsThrough(trial, w, index)
		s := scored{b: c, racks: min(racks, wantRacks), regions: min(regions, max(wantRegions, 1)),
			rackUse: rackCount[RackKey(c)], regUse: regionCount[c.Region], tie: perm[i]}
		if better(s.regions, s.racks, s.regUse, s.rackUse, s.tie, best.regions, best.racks, best.regUse, best.rackUse, best.tie, wantRegions > 1) {
			best = s
		}
	}
	okRacks := best.racks >= wantRacks
	okRegions := best.regions >= wantRegions
	if (!okRacks && p.enforceRacks) || (!okRegions && p.enforceRegions) {
		p.metrics.errors.WithLabelValues(p.name).Inc()
		return BookieInfo{}, fmt.Errorf("%w: replacing position %d: every write quorum of %d through it must span %s; "+
			"the best of %d writable candidates reaches %s",
			ErrNotEnoughBookies, index, w, p.spreadText(wantRacks, wantRegions), len(elig), p.spreadText(best.racks, best.regions))
	}
	if !okRacks || !okRegions {
		p.reportDegraded("replace",
			spreadGoal{e: e, w: w, minRacks: wantRacks, minRegions: wantRegions},
			spreadGoal{e: e, w: w, minRacks: min(best.racks, wantRacks), minRegions: min(best.regions, wantRegions)}, e, w)
	}
	p.metrics.ensembles.WithLabelValues(p.name, "replace").Inc()
	return best.b, nil
}

// better orders replacement candidates: more spread first (regions before
// racks when regions matter), then less represented region and rack, then random.
func better(reg, rk, regUse, rkUse, tie, bReg, bRk, bRegUse, bRkUse, bTie int, regionsFirst bool) bool {
	if bRk < 0 {
		return true
	}
	if regionsFirst {
		if reg != bReg {
			return reg > bReg
		}
	}
	if rk != bRk {
		return rk > bRk
	}
	if !regionsFirst && reg != bReg {
		return reg > bReg
	}
	if regionsFirst && regUse != bRegUse {
		return regUse < bRegUse
	}
	if rkUse != bRkUse {
		return rkUse < bRkUse
	}
	if regUse != bRegUse {
		return regUse < bRegUse
	}
	return tie < bTie
}

// windowsThrough returns the smallest number of distinct racks and of
// distinct regions over the write quorums that contain position index.
func windowsThrough(ensemble []BookieInfo, w, index int) (racks, regions int) {
	e := len(ensemble)
	starts := w
	if w == e {
		starts = 1
	}
	racks, regions = w+1, w+1
	for k := 0; k < starts; k++ {
		st := (index - k + e) % e
		racks = min(racks, windowDistinct(ensemble, st, w, RackKey))
		regions = min(regions, windowDistinct(ensemble, st, w, func(b BookieInfo) string { return b.Region }))
	}
	return racks, regions
}
