package broker

import (
	"context"
	"sync"
	"time"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
)

// A topic's periodic work, run by the broker's scheduler (timerwheel.go).
//
// Two jobs per topic, each a sequence of rounds that never overlap, as the
// two goroutines per topic (loop, backlogLoop) they replace:
//
//   - the loop job: persist dirty cursors and refresh the rates every
//     persist tick (persistTick: the namespace's cursor persist interval,
//     followed when it changes), run retention (after re-reading the
//     policies) every RetentionInterval;
//   - the backlog job (ttl.go): a backlog round every BacklogPolicyInterval,
//     at once when kicked (kickBacklog), and at once when the topic is given
//     new effective policies (setPolicies; this replaces a 500 ms poll per
//     topic that compared the policy pointer).
//
// Due times follow time.Ticker: on the grid start + k×period, and a tick
// that falls while a round runs makes one more round right after it (the
// ticker's buffered tick), never more. Each round first waits on
// Testing.TopicLoopFreeze and stops if the topic is closing. close cancels
// both jobs and waits for a running loop round (as it waited for the loop
// goroutine); a running backlog round is cancelled through its context and
// not waited for (as before).
type topicJobs struct {
	// mu guards the fields below. Lock order: topicJobs.mu, then the
	// scheduler's mu. Never held while calling t.mu-taking methods.
	mu      sync.Mutex
	started bool
	closed  bool
	// running counts loop rounds running (Add only under mu, !closed).
	running sync.WaitGroup

	loop          schedJob
	tick          time.Duration // the persist period in force
	nextPersist   time.Time
	nextRetention time.Time

	backlog     schedJob
	every       time.Duration // backlog round period
	nextBacklog time.Time
	seen        *clientv1.NamespacePolicies // policies of the last round
	// polChanged: setPolicies gave the topic a new policy object since
	// the backlog job last compared it with seen.
	polChanged   bool
	roundRunning bool
	kicked       bool
}

// startJobs schedules the topic's periodic work; once, at the end of load.
func (t *topic) startJobs() {
	tick := t.persistTick()
	seen := t.currentPolicies()
	t.backlog.init()
	every := t.b.cfg.BacklogPolicyInterval
	if every <= 0 {
		every = defaultBacklogPolicyInterval
	}
	now := time.Now()
	j := &t.jobs
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.started || j.closed {
		return
	}
	j.started = true
	j.loop = newSchedJob(t.loopDue)
	j.tick = tick
	j.nextPersist = now.Add(tick)
	j.nextRetention = now.Add(t.b.cfg.RetentionInterval)
	j.backlog = newSchedJob(t.backlogDue)
	j.every = every
	j.nextBacklog = now.Add(every)
	j.seen = seen
	t.b.sched.at(&j.loop, minTime(j.nextPersist, j.nextRetention))
	backlogDue := j.nextBacklog
	if j.kicked || j.polChanged {
		backlogDue = now // kicked, or new policies, before the start
	}
	t.b.sched.at(&j.backlog, backlogDue)
}

// stopJobs unschedules the topic's work; waitJobs then waits for a running
// loop round. Called by close, after t.stop is closed.
func (t *topic) stopJobs() {
	j := &t.jobs
	j.mu.Lock()
	defer j.mu.Unlock()
	j.closed = true
	if j.started {
		t.b.sched.cancel(&j.loop)
		t.b.sched.cancel(&j.backlog)
	}
}

func (t *topic) waitJobs() { t.jobs.running.Wait() }

// loopDue (scheduler goroutine) starts a loop round. A round with nothing
// to write (only the persist tick due, no cursor dirty) is done right here:
// refresh the rates and schedule the next tick, without a goroutine, a
// context or a timer — what 100 000 idle topics cost each second. With
// Testing.TopicLoopFreeze set every round goes through loopRound, so that
// it parks there as tests expect.
func (t *topic) loopDue(now time.Time) {
	j := &t.jobs
	j.mu.Lock()
	if j.closed {
		j.mu.Unlock()
		return
	}
	quiet := t.b.cfg.Testing.TopicLoopFreeze == nil && !now.Before(j.nextPersist) && now.Before(j.nextRetention)
	tick := j.tick
	j.mu.Unlock()
	if quiet && !t.stopped() && !t.anyCursorDirty() {
		t.updateRates()
		d := t.persistTick()
		j.mu.Lock()
		defer j.mu.Unlock()
		if j.closed {
			return
		}
		if d != tick {
			j.tick = d
			j.nextPersist = now.Add(d)
		} else {
			j.nextPersist = nextTick(j.nextPersist, tick, now)
		}
		t.b.sched.at(&j.loop, minTime(j.nextPersist, j.nextRetention))
		return
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.closed {
		return
	}
	j.running.Add(1)
	go t.loopRound()
}

// anyCursorDirty reports whether a subscription has a cursor change to
// persist (what persistCursors(false) would write).
func (t *topic) anyCursorDirty() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, s := range t.subs {
		s.mu.Lock()
		dirty := s.dirty
		s.mu.Unlock()
		if dirty {
			return true
		}
	}
	return false
}

// loopRound persists cursors and/or runs retention, whichever is due, then
// schedules the next round.
func (t *topic) loopRound() {
	j := &t.jobs
	defer j.running.Done()
	t.b.cfg.Testing.TopicLoopFreeze.wait(t.stop)
	if t.stopped() {
		return
	}
	now := time.Now()
	j.mu.Lock()
	persistDue, tick := !now.Before(j.nextPersist), j.tick
	retentionDue := !now.Before(j.nextRetention)
	if persistDue {
		j.nextPersist = nextTick(j.nextPersist, tick, now)
	}
	if retentionDue {
		j.nextRetention = nextTick(j.nextRetention, t.b.cfg.RetentionInterval, now)
	}
	j.mu.Unlock()
	if persistDue {
		t.persistCursors(false)
		t.updateRates()
		if d := t.persistTick(); d != tick {
			// The namespace policy changed: a new period from now (Ticker.Reset).
			j.mu.Lock()
			j.tick = d
			j.nextPersist = time.Now().Add(d)
			j.mu.Unlock()
		}
	}
	if retentionDue && !t.stopped() {
		if persistDue {
			// A second round, as the loop goroutine took one tick at a time.
			t.b.cfg.Testing.TopicLoopFreeze.wait(t.stop)
		}
		if !t.stopped() {
			ctx, cancel := context.WithTimeout(context.Background(), t.b.cfg.OperationTimeout)
			t.refreshPolicies(ctx)
			if err := t.runRetention(ctx); err != nil {
				t.log.Warn("retention", "err", err)
			}
			cancel()
		}
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if !j.closed {
		// A due time already past (a tick during this round) runs at once.
		t.b.sched.at(&j.loop, minTime(j.nextPersist, j.nextRetention))
	}
}

// backlogDue (scheduler goroutine) starts a backlog round when its tick is
// due, it was kicked, or the topic has new policies; otherwise it schedules
// the next tick.
func (t *topic) backlogDue(now time.Time) {
	j := &t.jobs
	j.mu.Lock()
	if j.closed {
		j.mu.Unlock()
		return
	}
	round := j.kicked
	if !now.Before(j.nextBacklog) {
		round = true
		j.nextBacklog = nextTick(j.nextBacklog, j.every, now)
	}
	if j.polChanged {
		j.polChanged = false
		if !round {
			seen := j.seen
			j.mu.Unlock()
			cur := t.currentPolicies() // takes t.mu: not under j.mu
			j.mu.Lock()
			if j.closed {
				j.mu.Unlock()
				return
			}
			round = cur != seen
		}
	}
	if round && t.b.cfg.Testing.TopicLoopFreeze == nil {
		// A round under policies with no TTL and no eviction does nothing
		// (backlogRound): note the policies seen, as it would, and skip it.
		seen := j.seen
		j.mu.Unlock()
		cur := t.currentPolicies()
		j.mu.Lock()
		if j.closed {
			j.mu.Unlock()
			return
		}
		if !backlogWork(cur) {
			if cur != seen {
				j.seen = cur
			}
			round = false
			j.kicked = false
		}
	}
	if round {
		j.kicked = false
		j.roundRunning = true
		j.mu.Unlock()
		go t.backlogRun()
		return
	}
	t.b.sched.at(&j.backlog, j.nextBacklog)
	j.mu.Unlock()
}

// backlogRun is one backlog round; then it schedules the next.
func (t *topic) backlogRun() {
	j := &t.jobs
	seen := t.currentPolicies()
	j.mu.Lock()
	j.seen = seen
	j.mu.Unlock()
	t.b.cfg.Testing.TopicLoopFreeze.wait(t.stop)
	if !t.stopped() {
		ctx, cancel := context.WithTimeout(context.Background(), t.b.cfg.OperationTimeout)
		go func() { // the round ends with the topic
			select {
			case <-t.stop:
				cancel()
			case <-ctx.Done():
			}
		}()
		t.backlogRound(ctx)
		cancel()
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	j.roundRunning = false
	if j.closed {
		return
	}
	due := j.nextBacklog
	if j.kicked || j.polChanged {
		due = time.Now()
	}
	t.b.sched.at(&j.backlog, due)
}

// policiesChanged (setPolicies) has the backlog job compare the topic's
// new policies with those of its last round, at once.
func (t *topic) policiesChanged() {
	j := &t.jobs
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.closed {
		return
	}
	j.polChanged = true
	if j.started && !j.roundRunning {
		t.b.sched.at(&j.backlog, time.Now())
	}
}

// kickBacklog asks the backlog pass for a round now (once more after the
// running one, if one runs).
func (t *topic) kickBacklog() {
	t.backlog.init()
	j := &t.jobs
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.kicked || j.closed {
		return
	}
	j.kicked = true
	if j.started && !j.roundRunning {
		t.b.sched.at(&j.backlog, time.Now())
	}
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
