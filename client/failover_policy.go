package client

import (
	"fmt"
	"time"
)

// failoverPolicy is the automatic failover policy as a pure state machine:
// it takes probe results (region index, ok, time) and answers which region
// to use. No goroutines, sockets or clocks: the client's probe loop (see
// failover.go) feeds it and acts on its decisions.
//
// Rules: after failedProbes failed probes in a row of the active region,
// switch to the first region, in list order, whose last probe succeeded.
// While not on the primary (index 0), switch back to it once it has
// answered every probe for switchBackDelay (negative: never).
type failoverPolicy struct {
	failedProbes    int
	switchBackDelay time.Duration

	active int
	// fails counts each region's failed probes in a row; firstFail is when
	// the current run of failures of a region started.
	fails     []int
	firstFail []time.Time
	// healthySince is when each region's current run of successful probes
	// started (zero: its last probe failed, or it was never probed).
	healthySince []time.Time
}

func newFailoverPolicy(regions, active, failedProbes int, switchBackDelay time.Duration) *failoverPolicy {
	return &failoverPolicy{failedProbes: failedProbes, switchBackDelay: switchBackDelay, active: active,
		fails: make([]int, regions), firstFail: make([]time.Time, regions), healthySince: make([]time.Time, regions)}
}

// probed records the outcome of a probe of region i at now.
func (p *failoverPolicy) probed(i int, ok bool, now time.Time) {
	if ok {
		p.fails[i] = 0
		p.firstFail[i] = time.Time{}
		if p.healthySince[i].IsZero() {
			p.healthySince[i] = now
		}
		return
	}
	if p.fails[i] == 0 {
		p.firstFail[i] = now
	}
	p.fails[i]++
	p.healthySince[i] = time.Time{}
}

// failoverDecision is a switch the policy asks for.
type failoverDecision struct {
	to     int
	reason string
	// started is when the cause began: the active region's first failed
	// probe, or when the primary became healthy.
	started time.Time
}

// decide returns the switch to make at now, if any. The caller applies it
// with switched.
func (p *failoverPolicy) decide(now time.Time) (failoverDecision, bool) {
	a := p.active
	if p.fails[a] >= p.failedProbes {
		for i := range p.fails {
			if i != a && !p.healthySince[i].IsZero() {
				return failoverDecision{to: i, started: p.firstFail[a],
					reason: fmt.Sprintf("%d probes of the active region failed in a row", p.fails[a])}, true
			}
		}
		return failoverDecision{}, false
	}
	if a != 0 && p.switchBackDelay >= 0 && !p.healthySince[0].IsZero() && now.Sub(p.healthySince[0]) >= p.switchBackDelay {
		return failoverDecision{to: 0, started: p.healthySince[0].Add(p.switchBackDelay),
			reason: fmt.Sprintf("primary healthy for %v", p.switchBackDelay)}, true
	}
	return failoverDecision{}, false
}

// switched records that the client now uses region i (after a decision,
// or a controlled switch).
func (p *failoverPolicy) switched(i int) { p.active = i }

// targetTracker is the controlled policy's core: it follows a failover
// group's target only to a version higher than the highest it has seen.
// A region cut off from the global shard answers its last seen copy, which
// may be older than what the client already applied; following any change
// of version would send the client back to a target the operator replaced
// (and, with two regions answering different copies, back and forth).
// Versions of one group only grow (the global key's version), so the
// highest seen is the newest.
type targetTracker struct {
	// seen is the highest version observed (0: none).
	seen int64
}

// targetVerdict is what observe decided about one answer.
type targetVerdict int

const (
	// targetSame: the version already applied.
	targetSame targetVerdict = iota
	// targetNewer: a higher version: follow it.
	targetNewer
	// targetOlder: a lower version (a stale copy): ignored.
	targetOlder
)

// observe records an answer with version v.
func (t *targetTracker) observe(v int64) targetVerdict {
	switch {
	case v > t.seen:
		t.seen = v
		return targetNewer
	case v < t.seen:
		return targetOlder
	}
	return targetSame
}
