package topology

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// More errors returned by placement. Test with errors.Is.
var (
	// ErrInvalidArgument: bad placement input (sizes out of range, empty
	// bookie ID, index outside the ensemble); the text names the field and
	// the limit. Nothing was chosen.
	ErrInvalidArgument = errors.New("topology: invalid argument")
	// ErrPlacementViolation: CheckEnsemble found a write quorum that spans
	// too few racks or regions, or a bookie listed twice.
	ErrPlacementViolation = errors.New("topology: placement constraint violated")
)

// Limits shared by the placement policies.
const (
	// MaxEnsembleSize caps E. Ensembles are a handful of bookies; a cap keeps
	// the search and the ledger metadata small.
	MaxEnsembleSize = 64
	// DefaultSearchBudget is the default number of search steps a policy may
	// spend arranging one ensemble before it declares the constraint
	// unsatisfiable. Realistic topologies need a few dozen steps; 50,000
	// steps take about 0.2 s on one slow core, which bounds one call.
	DefaultSearchBudget = 50_000
)

// RackKey is the failure-domain key placement uses for a bookie's rack: rack
// names are only unique inside a region, so racks are told apart by
// region and rack together.
func RackKey(b BookieInfo) string { return b.Region + "/" + b.Rack }

// validateQuorums checks E ≥ Qw ≥ Qa ≥ 1 and E ≤ MaxEnsembleSize.
func validateQuorums(ensembleSize, writeQuorum, ackQuorum int) error {
	switch {
	case ensembleSize < 1 || ensembleSize > MaxEnsembleSize:
		return fmt.Errorf("%w: ensembleSize %d must be in [1, %d]", ErrInvalidArgument, ensembleSize, MaxEnsembleSize)
	case writeQuorum < 1 || writeQuorum > ensembleSize:
		return fmt.Errorf("%w: writeQuorum %d must be in [1, ensembleSize=%d]", ErrInvalidArgument, writeQuorum, ensembleSize)
	case ackQuorum < 1 || ackQuorum > writeQuorum:
		return fmt.Errorf("%w: ackQuorum %d must be in [1, writeQuorum=%d]", ErrInvalidArgument, ackQuorum, writeQuorum)
	}
	return nil
}

// eligible returns the candidates placement may choose: writable, not
// excluded, not in taken, first occurrence of each ID. An empty ID is bad input.
func eligible(candidates []BookieInfo, exclude map[string]bool, taken map[string]bool) ([]BookieInfo, error) {
	out := make([]BookieInfo, 0, len(candidates))
	seen := make(map[string]bool, len(candidates))
	for i, b := range candidates {
		if b.ID == "" {
			return nil, fmt.Errorf("%w: candidates[%d].ID is empty", ErrInvalidArgument, i)
		}
		if seen[b.ID] || b.ReadOnly || exclude[b.ID] || taken[b.ID] {
			continue
		}
		seen[b.ID] = true
		out = append(out, b)
	}
	return out, nil
}

// lockedRand makes a rand source safe for concurrent use by a policy.
type lockedRand struct {
	mu sync.Mutex
	r  *rand.Rand
}

func newLockedRand(src rand.Source) *lockedRand {
	if src == nil {
		now := uint64(time.Now().UnixNano())
		src = rand.NewPCG(now, now^0x9e3779b97f4a7c15)
	}
	return &lockedRand{r: rand.New(src)}
}

// perm returns a random permutation of [0, n).
func (l *lockedRand) perm(n int) []int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.r.Perm(n)
}

// placementMetrics are shared by every policy registered on a registerer.
type placementMetrics struct {
	adherenceFailures *prometheus.CounterVec
	errors            *prometheus.CounterVec
	ensembles         *prometheus.CounterVec
}

func newPlacementMetrics(reg prometheus.Registerer) (*placementMetrics, error) {
	m := &placementMetrics{
		adherenceFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meridian_placement_adherence_failures_total",
			Help: "Ensembles or replacements chosen in best-effort mode that do not meet the configured rack or region spread.",
		}, []string{"policy", "constraint"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meridian_placement_errors_total",
			Help: "Placement requests that failed because too few bookies, racks or regions were available.",
		}, []string{"policy"}),
		ensembles: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meridian_placement_choices_total",
			Help: "Successful placement requests, by operation (new ensemble or replacement).",
		}, []string{"policy", "op"}),
	}
	if reg == nil {
		return m, nil
	}
	var err error
	m.adherenceFailures, err = registerOrExisting(reg, m.adherenceFailures)
	if err != nil {
		return nil, err
	}
	m.errors, err = registerOrExisting(reg, m.errors)
	if err != nil {
		return nil, err
	}
	m.ensembles, err = registerOrExisting(reg, m.ensembles)
	if err != nil {
		return nil, err
	}
	return m, nil
}

// registerOrExisting registers c, or returns the collector already
// registered under the same name, so several policies can share a registry.
func registerOrExisting(reg prometheus.Registerer, c *prometheus.CounterVec) (*prometheus.CounterVec, error) {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(*prometheus.CounterVec); ok {
				return existing, nil
			}
		}
		return nil, fmt.Errorf("topology: register placement metrics: %w", err)
	}
	return c, nil
}

// CheckEnsemble reports whether every write quorum of ensemble (writeQuorum
// consecutive members, wrapping) spans at least min(minRacks, writeQuorum)
// racks (told apart by RackKey) and whether the members are distinct. It does
// not look at ReadOnly: an ensemble stays valid when a member later turns
// read-only. The error wraps ErrPlacementViolation (or ErrInvalidArgument for
// a bad writeQuorum) and names the first failing quorum.
func CheckEnsemble(ensemble []BookieInfo, writeQuorum, minRacks int) error {
	return checkSpread(ensemble, writeQuorum, minRacks, "racks", RackKey)
}

// CheckEnsembleRegions is CheckEnsemble for regions: every write quorum spans
// at least min(minRegions, writeQuorum) regions.
func CheckEnsembleRegions(ensemble []BookieInfo, writeQuorum, minRegions int) error {
	return checkSpread(ensemble, writeQuorum, minRegions, "regions", func(b BookieInfo) string { return b.Region })
}

func checkSpread(ensemble []BookieInfo, writeQuorum, minDomains int, what string, key func(BookieInfo) string) error {
	e := len(ensemble)
	if e == 0 {
		return fmt.Errorf("%w: ensemble is empty", ErrInvalidArgument)
	}
	if writeQuorum < 1 || writeQuorum > e {
		return fmt.Errorf("%w: writeQuorum %d must be in [1, len(ensemble)=%d]", ErrInvalidArgument, writeQuorum, e)
	}
	seen := make(map[string]int, e)
	for i, b := range ensemble {
		if j, dup := seen[b.ID]; dup {
			return fmt.Errorf("%w: bookie %q is at positions %d and %d", ErrPlacementViolation, b.ID, j, i)
		}
		seen[b.ID] = i
	}
	need := min(minDomains, writeQuorum)
	for s := 0; s < e; s++ {
		if got := windowDistinct(ensemble, s, writeQuorum, key); got < need {
			return fmt.Errorf("%w: write quorum starting at position %d spans %d %s, need %d",
				ErrPlacementViolation, s, got, what, need)
		}
		if writeQuorum == e {
			break // every window is the whole ensemble
		}
	}
	return nil
}

// windowDistinct counts distinct keys among the w members from position s, wrapping.
func windowDistinct(ensemble []BookieInfo, s, w int, key func(BookieInfo) string) int {
	set := make(map[string]struct{}, w)
	for k := 0; k < w; k++ {
		set[key(ensemble[(s+k)%len(ensemble)])] = struct{}{}
	}
	return len(set)
}
