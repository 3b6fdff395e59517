package topology

import (
	"fmt"
	"log/slog"
	"math/rand/v2"

	"github.com/prometheus/client_golang/prometheus"
)

// RegionAwareConfig configures the region-aware placement policy, for
// namespaces that want synchronous cross-region durability.
type RegionAwareConfig struct {
	// MinRegionsPerWriteQuorum is how many regions every write quorum must
	// span (capped at the write quorum size). Default 2; must be ≥ 1.
	MinRegionsPerWriteQuorum int
	// MinRacksPerWriteQuorum is the secondary goal: racks every write
	// quorum should span (capped at Qw; always best effort). Default 2.
	MinRacksPerWriteQuorum int
	// Enforce makes placement fail with ErrNotEnoughBookies when the
	// region spread cannot be met; otherwise it degrades and counts it in
	// meridian_placement_adherence_failures_total. Default false.
	Enforce bool
	// SearchBudget bounds the steps spent arranging one ensemble.
	// Default DefaultSearchBudget; must be ≥ 1.
	SearchBudget int
	// Registerer receives the placement metrics; nil registers nothing.
	Registerer prometheus.Registerer
	// Logger receives warnings about degraded placement; nil discards.
	Logger *slog.Logger
	// Rand is the source of random tie-breaks; nil seeds from the clock.
	Rand rand.Source
}

// DefaultRegionAwareConfig returns the defaults: 2 regions and 2 racks per
// write quorum, best effort.
func DefaultRegionAwareConfig() RegionAwareConfig {
	return RegionAwareConfig{MinRegionsPerWriteQuorum: 2, MinRacksPerWriteQuorum: 2, SearchBudget: DefaultSearchBudget}
}

// Validate checks the config; the error names the field and the limit.
func (c RegionAwareConfig) Validate() error {
	if c.MinRegionsPerWriteQuorum < 1 || c.MinRegionsPerWriteQuorum > MaxEnsembleSize {
		return fmt.Errorf("%w: MinRegionsPerWriteQuorum %d must be in [1, %d]", ErrInvalidArgument, c.MinRegionsPerWriteQuorum, MaxEnsembleSize)
	}
	if c.MinRacksPerWriteQuorum < 1 || c.MinRacksPerWriteQuorum > MaxEnsembleSize {
		return fmt.Errorf("%w: MinRacksPerWriteQuorum %d must be in [1, %d]", ErrInvalidArgument, c.MinRacksPerWriteQuorum, MaxEnsembleSize)
	}
	if c.SearchBudget < 1 {
		return fmt.Errorf("%w: SearchBudget %d must be ≥ 1", ErrInvalidArgument, c.SearchBudget)
	}
	return nil
}

// RegionAware places every write quorum across at least
// min(MinRegionsPerWriteQuorum, Qw) regions and, as a secondary goal,
// min(MinRacksPerWriteQuorum, Qw) racks. Candidates come from several
// regions' bookie registries. It is safe for concurrent use.
type RegionAware struct {
	p *spreadPolicy
}

var _ Placement = (*RegionAware)(nil)

// NewRegionAwarePlacement builds a region-aware policy.
func NewRegionAwarePlacement(cfg RegionAwareConfig) (*RegionAware, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	p, err := newSpreadPolicy("region_aware", cfg.MinRacksPerWriteQuorum, cfg.MinRegionsPerWriteQuorum, false, cfg.Enforce,
		cfg.SearchBudget, cfg.Rand, cfg.Registerer, cfg.Logger)
	if err != nil {
		return nil, err
	}
	return &RegionAware{p: p}, nil
}

// NewEnsemble implements Placement; errors as RackAware.NewEnsemble, with
// enforce mode applying to regions.
func (r *RegionAware) NewEnsemble(ensembleSize, writeQuorum, ackQuorum int, candidates []BookieInfo, exclude map[string]bool) ([]BookieInfo, error) {
	return r.p.newEnsemble(ensembleSize, writeQuorum, ackQuorum, candidates, exclude)
}

// ReplaceBookie implements Placement, keeping the region spread (and, best
// effort, the rack spread) of every write quorum through index.
func (r *RegionAware) ReplaceBookie(ensemble []BookieInfo, writeQuorum, index int, candidates []BookieInfo, exclude map[string]bool) (BookieInfo, error) {
	return r.p.replaceBookie(ensemble, writeQuorum, index, candidates, exclude)
}
