//go:build unix

package drill

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/meridianmq/meridian/client"
)

// prepareSubscriptions creates the topic in both regions and the
// workload's subscription before the first message, and says how its
// progress reaches To.
func (r *run) prepareSubscriptions(ctx context.Context, adminFrom, adminTo *client.Admin, spec *workloadSpec) (string, error) {
	cfg := r.cfg
	admins := []struct {
		name string
		a    *client.Admin
	}{{cfg.From, adminFrom}, {cfg.To, adminTo}}
	for _, x := range admins {
		if err := x.a.CreateTopic(ctx, r.topic); err != nil && !errors.Is(err, client.ErrAlreadyExists) {
			return "", fmt.Errorf("create topic %s in %s: %w", r.topic, x.name, err)
		}
	}
	if !cfg.PerRegionSubscription {
		// A replicated subscription: its acknowledgement vector reaches To
		// through the replicator, where the subscription is created by
		// the first update.
		spec.replicated = true
		if err := adminFrom.CreateReplicatedSubscription(ctx, r.topic, r.sub, client.Latest); err != nil {
			return "", fmt.Errorf("create replicated subscription %s on %s in %s: %w", r.sub, r.topic, cfg.From, err)
		}
		return fmt.Sprintf("replicated (acknowledgements replicated from %s to %s)", cfg.From, cfg.To), nil
	}
	// Without replicated subscriptions, the subscription exists in each
	// region on its own: created in both before the first message, the
	// copy in To holds every message, so a consumer that moves there
	// loses nothing and receives again what it had acknowledged in From.
	for _, x := range admins {
		if err := x.a.CreateSubscription(ctx, r.topic, r.sub, client.Latest); err != nil {
			return "", fmt.Errorf("create subscription %s on %s in %s: %w", r.sub, r.topic, x.name, err)
		}
	}
	return fmt.Sprintf("per-region (not replicated): created in %s and %s before the first message; the copy in %s delivers again what was acknowledged in %s", cfg.From, cfg.To, cfg.To, cfg.From), nil
}

// consumerOptions are the workload consumers' options.
func consumerOptions(spec workloadSpec, name string) client.ConsumerOptions {
	return client.ConsumerOptions{Topic: spec.topic, Subscription: spec.sub, Type: spec.subType,
		InitialPosition: client.Earliest, Name: name, ReceiverQueueSize: 1000, Replicated: spec.replicated}
}

// sampleLoop reads, every interval until ctx ends, the source region's
// topic stats: the replicated subscription's acknowledgement replication
// towards To (lag and pending acknowledgements) and the message
// replicator's lag. Unanswered reads (a dead region) record nothing.
func (r *run) sampleLoop(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		r.sampleOnce(ctx, interval)
	}
}

// sampleOnce takes one reading of the source region's topic stats
// (bounded by timeout); nothing is recorded when it does not answer.
func (r *run) sampleOnce(ctx context.Context, timeout time.Duration) {
	sctx, cancel := context.WithTimeout(ctx, timeout)
	st, err := r.adminFrom.TopicStats(sctx, r.topic)
	cancel()
	if err != nil {
		return
	}
	now := time.Now()
	for _, rs := range st.GetReplicators() {
		if rs.GetRemoteRegion() == r.cfg.To {
			r.rec.Sample(Sample{At: now, Name: SampleMsgLag, Unit: "ms", Value: rs.GetLagSeconds() * 1000})
		}
	}
	for _, ss := range st.GetSubscriptions() {
		if ss.GetName() != r.sub {
			continue
		}
		for _, ar := range ss.GetAckReplication() {
			if ar.GetRegion() == r.cfg.To {
				r.rec.Sample(Sample{At: now, Name: SampleAckLag, Unit: "ms", Value: ar.GetLagSeconds() * 1000})
				r.rec.Sample(Sample{At: now, Name: SamplePendingAcks, Unit: "acknowledgements", Value: float64(ar.GetPendingAcks())})
			}
		}
	}
}

// probeAndSwitch (ModeReconnect) probes From like the client's automatic
// policy does and moves the workload to To after FailedProbes failed
// probes in a row. The returned func stops it.
func (r *run) probeAndSwitch(w *workload, adminFrom *client.Admin, spec workloadSpec) func() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		failed := 0
		var firstFail time.Time
		t := time.NewTicker(r.cfg.ProbeInterval)
		defer t.Stop()
		for {
			began := time.Now()
			pctx, pcancel := context.WithTimeout(ctx, r.cfg.ProbeInterval)
			_, err := adminFrom.ListBrokers(pctx)
			pcancel()
			if ctx.Err() != nil {
				return
			}
			if err == nil {
				failed = 0
			} else {
				if failed == 0 {
					firstFail = began
				}
				failed++
				if failed >= r.cfg.FailedProbes {
					reason := fmt.Sprintf("%d failed probes of %s (drill-managed)", failed, r.cfg.From)
					if err := r.switchTo(ctx, w, spec, reason, firstFail); err != nil {
						r.note("switch to %s failed: %v", r.cfg.To, err)
					}
					return
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return func() {
		cancel()
		<-done
	}
}

// switchTo (ModeReconnect) opens the workload in To, makes it current and
// closes the clients of From: their unacknowledged sends fail and are
// resent in To.
func (r *run) switchTo(ctx context.Context, w *workload, spec workloadSpec, reason string, started time.Time) error {
	to := r.cfg.To
	var s *side
	for {
		c, err := client.New(ctx, r.regionOptions(to))
		if err == nil {
			if s, err = openSide(ctx, c, spec, to); err == nil {
				break
			}
			closeClient(c)
		}
		r.log.Warn("drill: opening the workload in the target region failed; retrying", "region", to, "err", err)
		if err := sleepCtx(ctx, time.Second); err != nil {
			return err
		}
	}
	old := w.replace(s)
	now := time.Now()
	r.rec.Event(Event{Kind: EventSwitch, At: now, From: r.cfg.From, To: to, Reason: reason, Took: now.Sub(started)})
	r.progress("[drill] workload moved %s → %s (%s) in %v", r.cfg.From, to, reason, now.Sub(started).Round(time.Millisecond))
	// From is dead or cut off: do not wait long for its flush; what it
	// does not acknowledge fails and is resent in To.
	go old.close(500 * time.Millisecond)
	return nil
}

// switchCommand is the operator's move of a switchback drill.
func (r *run) switchCommand(ctx context.Context, w *workload, spec workloadSpec) error {
	if r.cfg.Mode == ModeReconnect {
		return r.switchTo(ctx, w, spec, "operator command (drill-managed)", time.Now())
	}
	// The operator's admin call: the clients of the group follow its
	// target (they poll it every probe interval).
	group := "drill-" + r.cfg.ID
	if _, err := r.adminTo.SetFailoverTarget(ctx, group, r.cfg.To); err != nil {
		return fmt.Errorf("set failover target of group %s to %s: %w", group, r.cfg.To, err)
	}
	return nil
}
