//go:build unix

package drill

import (
	"context"
	"time"
)

// Broker readings: what the source region's broker reports about the
// drill's topic, sampled while it answers.

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
