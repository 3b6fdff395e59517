//go:build unix

package drill

import (
	"context"
	"fmt"
	"time"

	"github.com/meridianmq/meridian/client"
)

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
