package topology

import (
	"fmt"
	"log/slog"
	"math/rand/v2"

	"github.com/prometheus/client_golang/prometheus"
)

// RackAwareConfig configures the rack-aware placement policy.
type RackAwareConfig struct {
	// MinRacksPerWriteQuorum is how many racks every write quorum must span
	// (capped at the write quorum size). Default 2; must be ≥ 1.
	MinRacksPerWriteQuorum int
	// Enforce makes placement fail with ErrNotEnoughBookies when the racks
	// cannot give every write quorum its spread. When false (best effort,
	// the default) placement degrades to the best spread it can find and
	// counts it in meridian_placement_adherence_failures_total.
	Enforce bool
	// SearchBudget bounds the steps spent arranging one ensemble.
	// Default DefaultSearchBudget; must be ≥ 1.
	SearchBudget int
	// Registerer receives the placement metrics; nil registers nothing.
	// Several policies may share one registerer.
	Registerer prometheus.Registerer
	// Logger receives warnings about degraded placement; nil discards.
	Logger *slog.Logger
	// Rand is the source of the random choices between equally good
	// bookies (so load spreads). Nil seeds one from the clock; tests inject
	// a fixed source. The policy serialises its use.
	Rand rand.Source
}

// DefaultRackAwareConfig returns the defaults: 2 racks per write quorum,
// best effort.
func DefaultRackAwareConfig() RackAwareConfig {
	return RackAwareConfig{MinRacksPerWriteQuorum: 2, SearchBudget: DefaultSearchBudget}
}

// Validate checks the config; the error names the field and the limit.
func (c RackAwareConfig) Validate() error {
	if c.MinRacksPerWriteQuorum < 1 || c.MinRacksPerWriteQuorum > MaxEnsembleSize {
		return fmt.Errorf("%w: MinRacksPerWriteQuorum %d must be in [1, %d]", ErrInvalidArgument, c.MinRacksPerWriteQuorum, MaxEnsembleSize)
	}
	if c.SearchBudget < 1 {
		return fmt.Errorf("%w: SearchBudget %d must be ≥ 1", ErrInvalidArgument, c.SearchBudget)
	}
	return nil
}

// RackAware is the default placement policy: every write quorum of Qw
// consecutive ensemble members (wrapping) spans at least
// min(MinRacksPerWriteQuorum, Qw) racks, and bookies are spread over racks
// as evenly as the racks allow. Racks are told apart by RackKey. It is safe
// for concurrent use.
type RackAware struct {
	p *spreadPolicy
}

var _ Placement = (*RackAware)(nil)

// NewRackAwarePlacement builds a rack-aware policy.
func NewRackAwarePlacement(cfg RackAwareConfig) (*RackAware, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	p, err := newSpreadPolicy("rack_aware", cfg.MinRacksPerWriteQuorum, 0, cfg.Enforce, false,
		cfg.SearchBudget, cfg.Rand, cfg.Registerer, cfg.Logger)
	if err != nil {
		return nil, err
	}
	return &RackAware{p: p}, nil
}

// NewEnsemble implements Placement. Errors: ErrInvalidArgument (sizes not
// E ≥ Qw ≥ Qa ≥ 1, E ≤ MaxEnsembleSize, or an empty candidate ID),
// ErrNotEnoughBookies (fewer than E eligible bookies, or in enforce mode too
// few racks), with the numbers needed and found.
func (r *RackAware) NewEnsemble(ensembleSize, writeQuorum, ackQuorum int, candidates []BookieInfo, exclude map[string]bool) ([]BookieInfo, error) {
	return r.p.newEnsemble(ensembleSize, writeQuorum, ackQuorum, candidates, exclude)
}

// ReplaceBookie implements Placement. The replacement is never a current
// ensemble member (including the one at index), excluded, or read-only.
func (r *RackAware) ReplaceBookie(ensemble []BookieInfo, writeQuorum, index int, candidates []BookieInfo, exclude map[string]bool) (BookieInfo, error) {
	return r.p.replaceBookie(ensemble, writeQuorum, index, candidates, exclude)
}
