//go:build unix

package run

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"time"
)

// Shape is what the schedule needs to know of a cluster: its regions and
// how many processes of each role every region has.
type Shape struct {
	Regions []string
	Meta    int
	Bookies int
	Brokers int
}

// Validate reports a shape the catalogue cannot target.
func (s Shape) Validate() error {
	switch {
	case len(s.Regions) == 0:
		return fmt.Errorf("shape: regions: none")
	case s.Meta < 1 || s.Bookies < 1 || s.Brokers < 1:
		return fmt.Errorf("shape: want at least one meta, bookie and broker per region, have %d, %d, %d", s.Meta, s.Bookies, s.Brokers)
	}
	return nil
}

// Step is one fault of a schedule: at At (from the start of the fault
// phase) inject Kind on Targets, and heal it For later.
type Step struct {
	At      time.Duration `json:"at"`
	Kind    string        `json:"kind"`
	Targets []string      `json:"targets"`
	For     time.Duration `json:"for"`
	// Param is the kind's parameter: a latency, a bandwidth, a drop
	// fraction, a clock skew, a disk command (see the catalogue).
	Param string `json:"param,omitempty"`
}

func (s Step) String() string {
	p := ""
	if s.Param != "" {
		p = " " + s.Param
	}
	return fmt.Sprintf("+%v %s%s on %v for %v", s.At, s.Kind, p, s.Targets, s.For)
}

// Schedule bounds.
const (
	// minFaultFor and maxFaultFor bound one fault's length: long enough
	// for a failover (3 failed probes of 1s) and a session expiry, short
	// enough that a run sees many faults.
	minFaultFor = 3 * time.Second
	maxFaultFor = 12 * time.Second
	// minGap and maxGap bound the quiet time between two faults: the
	// cluster recovers (restarts, re-replication) before the next.
	minGap = 2 * time.Second
	maxGap = 6 * time.Second
	// overlapChance is the chance that a network fault starts while a
	// process fault is still active.
	overlapChance = 0.25
)

// Plan returns the fault schedule of a run: a pure function of its
// arguments (a PCG seeded with seed), so the same seed gives the same
// schedule. kinds are catalogue kind names (see Kinds); each appears at
// least once when duration allows it, in a seeded order, then kinds are
// drawn at random. Faults mostly come one at a time with quiet gaps;
// sometimes a network fault overlaps a process fault. Every step ends
// (is healed) by duration.
func Plan(seed int64, kinds []string, duration time.Duration, shape Shape) ([]Step, error) {
	if err := shape.Validate(); err != nil {
		return nil, err
	}
	var usable []Kind
	for _, name := range kinds {
		k, ok := KindByName(name)
		if !ok {
			return nil, fmt.Errorf("faults: %q is not a fault of the catalogue (meridian chaos list)", name)
		}
		if k.MinRegions > len(shape.Regions) || (k.Damages && shape.Bookies < 2) {
			continue
		}
		usable = append(usable, k)
	}
	if len(usable) == 0 {
		return nil, nil
	}
	rng := rand.New(rand.NewPCG(uint64(seed), 0x6d6572696469616e))
	// The one bookie per region that data-destroying faults may hit.
	victim := map[string]int{}
	for _, r := range shape.Regions {
		victim[r] = rng.IntN(shape.Bookies)
	}
	// The first pass: every kind once, in a seeded order. When duration
	// is short, each gets an equal slot.
	order := slices.Clone(usable)
	rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	slot := duration / time.Duration(len(order))
	var steps []Step
	t := time.Duration(0)
	first := true
	for i := 0; ; i++ {
		var k Kind
		if i < len(order) {
			k = order[i]
		} else {
			k = usable[rng.IntN(len(usable))]
		}
		gap := between(rng, minGap, maxGap)
		d := between(rng, minFaultFor, maxFaultFor)
		if i < len(order) && slot < gap+d+minGap {
			// A short run: fit every kind in its slot.
			gap = slot / 4
			d = slot / 2
		}
		if first {
			gap = 0
			first = false
		}
		at := t + gap
		// Sometimes a network fault overlaps the previous process fault;
		// never a data-destroying one: until its bookie has restarted
		// after a cut journal tail, the other copy of its last entries
		// must stay reachable (docs/chaos/disk-clock.md).
		if n := len(steps); n > 0 && i >= len(order) && k.Family == FamilyNet {
			prev := steps[n-1]
			if pk, _ := KindByName(prev.Kind); pk.Family != FamilyNet && pk.Family != FamilyPartition && !pk.Damages && rng.Float64() < overlapChance {
				at = prev.At + prev.For/2
			}
		}
		if at+d > duration {
			if i < len(order) && at < duration {
				d = duration - at
			} else {
				break
			}
		}
		if d <= 0 {
			break
		}
		targets, param := k.pick(rng, shape)
		if k.Damages {
			for i, t := range targets {
				if reg, role, _, err := parseProc(t); err == nil && role == "bookie" {
					targets[i] = procName(reg, role, victim[reg])
				}
			}
		}
		steps = append(steps, Step{At: at.Round(time.Millisecond), Kind: k.Name, Targets: targets, For: d.Round(time.Millisecond), Param: param})
		t = max(t, at+d)
	}
	slices.SortStableFunc(steps, func(a, b Step) int { return int(a.At - b.At) })
	return steps, nil
}

// between returns a uniform duration in [lo, hi].
func between(rng *rand.Rand, lo, hi time.Duration) time.Duration {
	return lo + time.Duration(rng.Int64N(int64(hi-lo)+1))
}
