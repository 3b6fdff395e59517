package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
)

// Client failover between regions: the shell around failoverPolicy.
//
// A multi-region client uses one region at a time (ActiveRegion). Every
// lookup goes to the active region's brokers. A switch (automatic policy,
// failover group target, or SwitchTo) changes the active region, bumps the
// client's switch generation and closes the switch channel: every producer
// and consumer stream of an older generation is dropped, and each one
// reconnects through its usual reconnect path (lookup, open or subscribe)
// in the new region. Producers keep their name and sequence IDs and open
// with failover_from (the broker answers resends of messages already
// replicated from the old region as duplicates); consumers resubscribe by
// name. Acknowledgements of messages delivered by the old region are not
// sent to the new one (their positions mean nothing there): those messages
// are delivered again by the new region.

// FailoverEvent describes one region switch of a client.
type FailoverEvent struct {
	// From and To are the region names.
	From, To string
	// Reason says why (failed probes, primary healthy again, group
	// target, SwitchTo).
	Reason string
	// Started is when the cause began: the active region's first failed
	// probe, the operator's change of the group target, the SwitchTo call.
	Started time.Time
	// Switched is when the client switched.
	Switched time.Time
	// Took is from Started to the first producer or consumer reconnected
	// in To (to Switched when the client had none).
	Took time.Duration
}

// pendingSwitch is the last switch until a stream reconnects after it.
type pendingSwitch struct {
	ev  FailoverEvent
	gen uint64
}

// errRegionSwitch ends a stream of an older switch generation.
var errRegionSwitch = errors.New("client: region switch")

// ActiveRegion returns the name of the region the client uses ("" for a
// single-region client given a plain URL).
func (c *Client) ActiveRegion() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.regions[c.active].name
}

// Regions returns the client's region names, primary first.
func (c *Client) Regions() []string {
	out := make([]string, len(c.regions))
	for i, r := range c.regions {
		out[i] = r.name
	}
	return out
}

// SwitchTo moves the client, with every producer and consumer, to region
// (one of Options.Regions). It returns once the switch is decided; the
// streams reconnect in the background (OnFailover reports when). With the
// automatic policy the client may switch again by itself (back to the
// primary after SwitchBackDelay, or away from a failing region).
func (c *Client) SwitchTo(region string) error {
	for i, r := range c.regions {
		if r.name == region && region != "" {
			c.doSwitch(i, "SwitchTo "+region, time.Now())
			return nil
		}
	}
	return fmt.Errorf("%w: SwitchTo region %q: not one of the client's regions %v", ErrInvalidArgument, region, c.Regions())
}

// switchSignal returns the current switch generation and the channel
// closed by the next switch.
func (c *Client) switchSignal() (uint64, <-chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gen, c.switchCh
}

// doSwitch makes region to active; streams of older generations drop.
func (c *Client) doSwitch(to int, reason string, started time.Time) {
	now := time.Now()
	c.mu.Lock()
	if to == c.active || c.closed {
		c.mu.Unlock()
		return
	}
	from := c.regions[c.active].name
	c.active = to
	c.gen++
	gen := c.gen
	close(c.switchCh)
	c.switchCh = make(chan struct{})
	if started.After(now) {
		started = now
	}
	c.pending = &pendingSwitch{gen: gen, ev: FailoverEvent{From: from, To: c.regions[to].name, Reason: reason, Started: started, Switched: now}}
	idle := len(c.owned) == 0
	c.mu.Unlock()
	c.log.Warn("client failover: switching region", "from", from, "to", c.regions[to].name, "reason", reason)
	c.metrics.failovers.WithLabelValues(from, c.regions[to].name).Inc()
	if idle {
		c.connectedIn(gen)
	}
}

// connectedIn notes that a producer or consumer connected in switch
// generation gen: the first one after a switch completes it.
func (c *Client) connectedIn(gen uint64) {
	c.mu.Lock()
	ps := c.pending
	if ps == nil || ps.gen != gen {
		c.mu.Unlock()
		return
	}
	c.pending = nil
	c.mu.Unlock()
	ev := ps.ev
	ev.Took = time.Since(ev.Started)
	c.metrics.switchSeconds.Observe(ev.Took.Seconds())
	c.log.Warn("client failover: reconnected in the new region", "from", ev.From, "to", ev.To, "took", ev.Took)
	if c.opts.OnFailover != nil {
		c.opts.OnFailover(ev)
	}
}

// attemptCtx derives a context for one connection attempt that a region
// switch cancels (the attempt may be stuck on the old region).
func (c *Client) attemptCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	_, sw := c.switchSignal()
	actx, cancel := context.WithCancel(ctx)
	go func() {
		select {
		case <-sw:
			cancel()
		case <-actx.Done():
		}
	}()
	return actx, cancel
}

// waitRetry waits for bo's next delay, ctx, or a region switch (then at
// once, resetting bo).
func (c *Client) waitRetry(ctx context.Context, bo *backoff) error {
	_, sw := c.switchSignal()
	t := time.NewTimer(bo.delay())
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-sw:
		bo.reset()
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// watchSwitch calls stop when the client switches region after
// generation gen (at once if it already has); the returned func ends the
// watch.
func (c *Client) watchSwitch(gen uint64, stop func()) (end func()) {
	cur, sw := c.switchSignal()
	if cur != gen {
		stop()
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		select {
		case <-sw:
			stop()
		case <-done:
		}
	}()
	var once sync.Once
	return func() { once.Do(func() { close(done) }) }
}

// isStale reports whether something of switch generation gen belongs to a
// region the client has left.
func (c *Client) isStale(gen uint64) bool {
	cur, _ := c.switchSignal()
	return cur != gen
}

// failoverFrom lists the regions a producer tells the broker it may have
// written to before (OpenProducer.failover_from): the client's regions
// and those the producer opened in. nil for a single-region client.
func (c *Client) failoverFrom(used []string) []string {
	if !c.multiRegion() {
		return nil
	}
	out := make([]string, 0, len(c.regions)+len(used))
	add := func(r string) {
		if r == "" || len(out) >= MaxRegions {
			return
		}
		for _, x := range out {
			if x == r {
				return
			}
		}
		out = append(out, r)
	}
	for _, r := range c.regions {
		add(r.name)
	}
	for _, r := range used {
		add(r)
	}
	return out
}

// initialTarget makes a controlled client start in its group's target
// region when the target is readable now (bounded by ProbeTimeout per
// broker tried). It returns the target version seen (0: none).
func (c *Client) initialTarget(ctx context.Context) int64 {
	if c.opts.Failover.Mode != FailoverControlled {
		return 0
	}
	tgt, from, err := c.readTarget(ctx)
	if err != nil {
		return 0
	}
	c.noteTarget(tgt, from)
	for i, r := range c.regions {
		if r.name == tgt.GetRegion() {
			c.mu.Lock()
			c.active = i
			c.mu.Unlock()
		}
	}
	return tgt.GetVersion()
}

// startFailover starts the policy loop of a multi-region client; seen is
// the failover group target version already applied (controlled).
func (c *Client) startFailover(seen int64) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	c.mu.Lock()
	c.stopFailover, c.failoverDone = cancel, done
	c.mu.Unlock()
	go func() {
		defer close(done)
		if c.opts.Failover.Mode == FailoverControlled {
			c.controlledLoop(ctx, seen)
		} else {
			c.autoLoop(ctx)
		}
	}()
}

// autoLoop probes every region each ProbeInterval and applies the policy.
func (c *Client) autoLoop(ctx context.Context) {
	fo := c.opts.Failover
	c.mu.Lock()
	pol := newFailoverPolicy(len(c.regions), c.active, fo.FailedProbes, fo.SwitchBackDelay)
	c.mu.Unlock()
	t := time.NewTicker(fo.ProbeInterval)
	defer t.Stop()
	ok := make([]bool, len(c.regions))
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		var wg sync.WaitGroup
		for i := range c.regions {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ok[i] = c.probe(ctx, i)
			}()
		}
		wg.Wait()
		if ctx.Err() != nil {
			return
		}
		now := time.Now()
		c.mu.Lock()
		pol.switched(c.active)
		c.mu.Unlock()
		for i, v := range ok {
			pol.probed(i, v, now)
			c.metrics.regionUp.WithLabelValues(c.regions[i].name).Set(boolGauge(v))
		}
		if d, yes := pol.decide(now); yes {
			c.doSwitch(d.to, d.reason, d.started)
			pol.switched(d.to)
		}
	}
}

func boolGauge(v bool) float64 {
	if v {
		return 1
	}
	return 0
}

// probe asks region ri's brokers for their broker list, each within
// ProbeTimeout in all; any answer makes the region healthy.
func (c *Client) probe(ctx context.Context, ri int) bool {
	c.mu.Lock()
	cands := append([]string(nil), c.regions[ri].known...)
	c.mu.Unlock()
	pctx, cancel := context.WithTimeout(ctx, c.opts.Failover.ProbeTimeout)
	defer cancel()
	for _, addr := range cands[:min(len(cands), 3)] {
		cc, err := c.conn(addr)
		if err != nil {
			return false
		}
		if _, err := clientv1.NewAdminClient(cc).ListBrokers(pctx, &clientv1.ListBrokersRequest{}); err == nil {
			return true
		}
		if pctx.Err() != nil {
			return false
		}
	}
	return false
}

// controlledLoop follows the failover group's target: every ProbeInterval
// it reads it (readTarget) and switches when its version is higher than
// the highest seen (targetTracker) and names a region other than the
// active one. An older version (a region answering a stale copy) is
// ignored and logged.
func (c *Client) controlledLoop(ctx context.Context, seen int64) {
	fo := c.opts.Failover
	t := time.NewTicker(fo.ProbeInterval)
	defer t.Stop()
	tr := targetTracker{seen: seen}
	warned, warnedOld, warnedStale := "", int64(-1), int64(-1)
	for {
		tgt, from, err := c.readTarget(ctx)
		if err == nil {
			c.noteTarget(tgt, from)
			if tgt.GetStale() && warnedStale != tgt.GetVersion() {
				warnedStale = tgt.GetVersion()
				c.log.Warn("client failover: group target may be stale (the region answering could not reach the global metadata)",
					"group", fo.Group, "region_asked", from, "target", tgt.GetRegion(), "version", tgt.GetVersion(),
					"confirmed", time.UnixMilli(tgt.GetConfirmedMs()).UTC())
			}
		}
		switch {
		case err != nil:
			if !errors.Is(err, ErrNotFound) {
				c.log.Debug("client failover: group target unreadable", "group", fo.Group, "err", err)
			}
		default:
			switch tr.observe(tgt.GetVersion()) {
			case targetOlder:
				c.metrics.targetIgnored.Inc()
				if warnedOld != tgt.GetVersion() {
					warnedOld = tgt.GetVersion()
					c.log.Warn("client failover: ignoring an older group target", "group", fo.Group, "region_asked", from,
						"target", tgt.GetRegion(), "version", tgt.GetVersion(), "applied_version", tr.seen, "stale", tgt.GetStale())
				}
			case targetNewer:
				idx := -1
				for i, r := range c.regions {
					if r.name == tgt.GetRegion() {
						idx = i
					}
				}
				switch {
				case idx >= 0:
					c.doSwitch(idx, fmt.Sprintf("failover group %s target set to %s (version %d)", fo.Group, tgt.GetRegion(), tgt.GetVersion()),
						time.UnixMilli(tgt.GetUpdatedMs()))
				case warned != tgt.GetRegion():
					warned = tgt.GetRegion()
					c.log.Warn("client failover: group target is not one of the client's regions; staying", "group", fo.Group, "target", tgt.GetRegion(), "regions", c.Regions())
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// FailoverTargetStatus is the last failover group target a controlled
// client read.
type FailoverTargetStatus struct {
	// Group, Region and Version are the target as answered.
	Group   string
	Region  string
	Version int64
	// Stale is true when the answering broker could not read the global
	// metadata and answered its last seen copy: a newer target may exist.
	Stale bool
	// ConfirmedAt is when the answering broker last read the target from
	// the global metadata (zero: unknown).
	ConfirmedAt time.Time
	// From is the region whose broker answered; ReadAt is when.
	From   string
	ReadAt time.Time
}

// FailoverTarget returns the last failover group target the client read
// (controlled policy); false before the first one.
func (c *Client) FailoverTarget() (FailoverTargetStatus, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.lastTarget == nil {
		return FailoverTargetStatus{}, false
	}
	return *c.lastTarget, true
}

// noteTarget records tgt, read from region from, as the last target read.
func (c *Client) noteTarget(tgt *clientv1.FailoverTarget, from string) {
	st := &FailoverTargetStatus{Group: tgt.GetGroup(), Region: tgt.GetRegion(), Version: tgt.GetVersion(), Stale: tgt.GetStale(),
		From: from, ReadAt: time.Now()}
	if ms := tgt.GetConfirmedMs(); ms > 0 {
		st.ConfirmedAt = time.UnixMilli(ms)
	}
	c.mu.Lock()
	c.lastTarget = st
	c.mu.Unlock()
	c.metrics.targetStale.Set(boolGauge(tgt.GetStale()))
}

// readTarget reads the group's target from the first region that answers
// with a fresh copy, active region first, and returns it with the name of
// the region that answered. A stale answer (that broker could not read the
// global metadata) does not end the search: the other regions are asked
// too, and the highest version wins (a fresh one on a tie), so a client
// whose active region is cut off still learns a newer target from another.
func (c *Client) readTarget(ctx context.Context) (*clientv1.FailoverTarget, string, error) {
	c.mu.Lock()
	order := []int{c.active}
	for i := range c.regions {
		if i != c.active {
			order = append(order, i)
		}
	}
	c.mu.Unlock()
	var best *clientv1.FailoverTarget
	bestFrom := ""
	var last error
	for _, ri := range order {
		tgt, err := c.readTargetIn(ctx, ri)
		if err != nil {
			last = err
			if errors.Is(err, ErrNotFound) && best == nil {
				return nil, "", err
			}
			continue
		}
		if best == nil || tgt.GetVersion() > best.GetVersion() || tgt.GetVersion() == best.GetVersion() && !tgt.GetStale() {
			best, bestFrom = tgt, c.regions[ri].name
		}
		if !tgt.GetStale() {
			break
		}
	}
	if best != nil {
		return best, bestFrom, nil
	}
	return nil, "", last
}

// readTargetIn reads the group's target from region ri's brokers.
func (c *Client) readTargetIn(ctx context.Context, ri int) (*clientv1.FailoverTarget, error) {
	c.mu.Lock()
	cands := append([]string(nil), c.regions[ri].known...)
	c.mu.Unlock()
	var last error
	for _, addr := range cands[:min(len(cands), 2)] {
		cc, err := c.conn(addr)
		if err != nil {
			return nil, err
		}
		pctx, cancel := context.WithTimeout(ctx, c.opts.Failover.ProbeTimeout)
		tgt, err := clientv1.NewAdminClient(cc).GetFailoverTarget(pctx, &clientv1.GetFailoverTargetRequest{Group: c.opts.Failover.Group})
		cancel()
		if err == nil {
			return tgt, nil
		}
		last = mapError(err)
		if errors.Is(last, ErrNotFound) {
			return nil, last
		}
	}
	return nil, last
}
