package topology

import (
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func newRegion(t *testing.T, minRegions, minRacks int, enforce bool, reg prometheus.Registerer) *RegionAware {
	t.Helper()
	cfg := DefaultRegionAwareConfig()
	cfg.MinRegionsPerWriteQuorum = minRegions
	cfg.MinRacksPerWriteQuorum = minRacks
	cfg.Enforce = enforce
	cfg.Registerer = reg
	cfg.Rand = rand.NewPCG(9, 9)
	p, err := NewRegionAwarePlacement(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestRegionAwareNewEnsemble(t *testing.T) {
	tests := []struct {
		name                  string
		topo                  []BookieInfo
		e, w, a               int
		minRegions, minRacks  int
		enforce               bool
		wantErr               error
		wantRegions, wantRack int
		degraded              string // "" or the constraint label counted
	}{
		{name: "3 regions E3 Qw3", topo: bookies("us/a:2", "eu/a:2", "ap/a:2"), e: 3, w: 3, a: 2, minRegions: 3, minRacks: 3, enforce: true, wantRegions: 3, wantRack: 3},
		{name: "2 regions E4 Qw2 alternates", topo: bookies("us/a:2", "us/b:2", "eu/a:2", "eu/b:2"), e: 4, w: 2, a: 2, minRegions: 2, minRacks: 2, enforce: true, wantRegions: 2, wantRack: 2},
		{name: "2 regions E3 Qw3 Qa2 spans both", topo: bookies("us/a:3", "eu/a:3"), e: 3, w: 3, a: 2, minRegions: 2, minRacks: 2, enforce: true, wantRegions: 2, wantRack: 2},
		{name: "racks secondary degrade", topo: bookies("us/a:3", "eu/a:3"), e: 3, w: 3, a: 2, minRegions: 2, minRacks: 3, enforce: true, wantRegions: 2, wantRack: 2, degraded: "racks"},
		{name: "racks inside regions", topo: bookies("us/a:3", "us/b:3", "eu/a:3", "eu/b:3"), e: 4, w: 4, a: 3, minRegions: 2, minRacks: 4, enforce: true, wantRegions: 2, wantRack: 4},
		{name: "one region enforce", topo: bookies("us/a:3", "us/b:3"), e: 3, w: 2, a: 2, minRegions: 2, minRacks: 2, enforce: true, wantErr: ErrNotEnoughBookies},
		{name: "one region best effort keeps racks", topo: bookies("us/a:3", "us/b:3"), e: 4, w: 2, a: 2, minRegions: 2, minRacks: 1, wantRegions: 1, wantRack: 2, degraded: "regions"},
		{name: "read-only region ignored", topo: bookies("us/a:3", "eu/a:3!ro"), e: 3, w: 2, a: 2, minRegions: 2, minRacks: 2, enforce: true, wantErr: ErrNotEnoughBookies},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := newRegion(t, tc.minRegions, tc.minRacks, tc.enforce, prometheus.NewRegistry())
			ens, err := p.NewEnsemble(tc.e, tc.w, tc.a, tc.topo, nil)
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
			checkChosen(t, ens, tc.e, nil)
			if err := CheckEnsembleRegions(ens, tc.w, tc.wantRegions); err != nil {
				t.Fatalf("%v: %v", ids(ens), err)
			}
			if err := CheckEnsemble(ens, tc.w, tc.wantRack); err != nil {
				t.Fatalf("%v: %v", ids(ens), err)
			}
			for _, c := range []string{"racks", "regions"} {
				n := counterValue(t, p.p.metrics.adherenceFailures.WithLabelValues("region_aware", c))
				if (n > 0) != (c == tc.degraded) {
					t.Fatalf("adherence failures{constraint=%s} = %v, degraded = %q", c, n, tc.degraded)
				}
			}
		})
	}
}

func TestRegionAwareReplaceBookie(t *testing.T) {
	topo := bookies("us/a:3", "eu/a:3", "ap/a:1")
	p := newRegion(t, 2, 2, true, nil)
	ens := []BookieInfo{topo[0], topo[3], topo[1], topo[4]} // us eu us eu
	got, err := p.ReplaceBookie(ens, 2, 1, topo, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got.Region == "us" {
		t.Fatalf("replacement %+v would leave a write quorum in one region", got)
	}
	// Only us bookies left: enforce fails.
	excl := map[string]bool{"eu-a-2": true, "ap-a-0": true}
	if _, err := p.ReplaceBookie(ens, 2, 1, topo, excl); !errors.Is(err, ErrNotEnoughBookies) {
		t.Fatalf("err = %v", err)
	}
}
