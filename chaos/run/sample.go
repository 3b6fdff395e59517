//go:build unix

package run

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/meridianmq/meridian/chaos/check"
	"github.com/meridianmq/meridian/client"
)

// sampleInterval is how often the runner samples rates and backlogs.
const sampleInterval = time.Second

// sampleLoop records, every second, the per-region rates and every
// topic's replication and subscription backlogs, and prints the progress
// line every 5 seconds.
func (r *runner) sampleLoop(ctx context.Context, w *workload) {
	t := time.NewTicker(sampleInterval)
	defer t.Stop()
	last := map[string][4]int64{}
	for n := 1; ; n++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := time.Now()
		for _, reg := range r.cl.shape.Regions {
			c := r.rec.counts[reg]
			cur := [4]int64{c.sent.Load(), c.acked.Load(), c.delivered.Load(), c.errors.Load()}
			prev := last[reg]
			last[reg] = cur
			for i, name := range []string{"sent_per_s", "acked_per_s", "delivered_per_s", "errors_per_s"} {
				r.rec.add(check.Record{T: now, Kind: check.KindSample, Region: reg, Sample: &check.Sample{Name: name, Value: float64(cur[i]-prev[i]) / sampleInterval.Seconds()}})
			}
		}
		r.sampleBacklogs(ctx)
		if n%5 == 0 {
			r.progressLine(w)
		}
	}
}

// sampleBacklogs reads every topic's stats in every region (each bounded:
// a dead region records nothing) and records the backlog series.
func (r *runner) sampleBacklogs(ctx context.Context) {
	var wg sync.WaitGroup
	for _, reg := range r.cl.shape.Regions {
		for _, t := range r.topics {
			wg.Go(func() {
				sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				st, err := r.admins[reg].TopicStats(sctx, t)
				cancel()
				if err != nil {
					r.mu.Lock()
					// Unknown now: a dead region is not drained.
					r.backlog[reg+" "+t+" stats"] = 1
					r.mu.Unlock()
					return
				}
				now := time.Now()
				r.mu.Lock()
				delete(r.backlog, reg+" "+t+" stats")
				r.mu.Unlock()
				for _, rs := range st.GetReplicators() {
					v := float64(rs.GetBacklogEntries())
					r.rec.add(check.Record{T: now, Kind: check.KindSample, Region: reg, Topic: t,
						Sample: &check.Sample{Name: "repl_backlog_msgs", Labels: map[string]string{"remote": rs.GetRemoteRegion(), "topic": t}, Value: v}})
					r.setBacklog(fmt.Sprintf("%s %s repl->%s", reg, t, rs.GetRemoteRegion()), v)
				}
				for _, ss := range st.GetSubscriptions() {
					if !r.isRunSub(ss.GetName()) {
						continue
					}
					v := float64(ss.GetBacklogEntries())
					r.rec.add(check.Record{T: now, Kind: check.KindSample, Region: reg, Topic: t,
						Sample: &check.Sample{Name: "sub_backlog_msgs", Labels: map[string]string{"sub": ss.GetName(), "topic": t}, Value: v}})
					r.setBacklog(fmt.Sprintf("%s %s sub %s", reg, t, ss.GetName()), v)
				}
			})
		}
	}
	wg.Wait()
}

func (r *runner) isRunSub(name string) bool {
	r.mu.Lock()
	op := slices.Contains(r.opSubs, name)
	r.mu.Unlock()
	return op || slices.ContainsFunc(r.subs, func(s subSpec) bool { return s.Name == name })
}

func (r *runner) setBacklog(key string, v float64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.backlog[key] = v
}

// drained lists the backlogs that are not zero.
func (r *runner) notDrained() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, k := range slices.Sorted(maps.Keys(r.backlog)) {
		if r.backlog[k] > 0 {
			out = append(out, fmt.Sprintf("%s=%.0f", k, r.backlog[k]))
		}
	}
	return out
}

func (r *runner) progressLine(w *workload) {
	var parts []string
	for _, reg := range r.cl.shape.Regions {
		c := r.rec.counts[reg]
		parts = append(parts, fmt.Sprintf("%s: sent %d acked %d delivered %d errors %d", reg, c.sent.Load(), c.acked.Load(), c.delivered.Load(), c.errors.Load()))
	}
	r.mu.Lock()
	var act []string
	for _, id := range slices.Sorted(maps.Keys(r.active)) {
		act = append(act, r.active[id])
	}
	r.mu.Unlock()
	if len(act) == 0 {
		act = []string{"none"}
	}
	r.progress("%4.0fs | %s | in flight %d | faults: %s", time.Since(r.start).Seconds(), strings.Join(parts, " | "), w.inflight.Load(), strings.Join(act, "; "))
}

// waitFlowing waits until every region has an acknowledged send and a
// delivery (the cluster serves) before the first fault.
func (r *runner) waitFlowing(ctx context.Context) error {
	deadline := time.Now().Add(90 * time.Second)
	for {
		ok := true
		var state []string
		for _, reg := range r.cl.shape.Regions {
			c := r.rec.counts[reg]
			if c.acked.Load() == 0 || c.delivered.Load() == 0 {
				ok = false
			}
			state = append(state, fmt.Sprintf("%s: %d acked, %d delivered", reg, c.acked.Load(), c.delivered.Load()))
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the workload does not flow after 90s (%s)", strings.Join(state, "; "))
		}
		if err := sleepUntil(ctx, time.Now().Add(100*time.Millisecond)); err != nil {
			return err
		}
	}
}

// quiet waits until every send resolved and every backlog is 0 in two
// samples in a row, or cfg.Quiet passed (then the run goes on: the
// checkers judge what did not arrive).
func (r *runner) quiet(ctx context.Context, w *workload) error {
	start := time.Now()
	deadline := start.Add(r.cfg.Quiet)
	clean := 0
	for {
		if err := sleepUntil(ctx, time.Now().Add(sampleInterval)); err != nil {
			return err
		}
		inflight := w.inflight.Load()
		left := r.notDrained()
		if inflight == 0 && len(left) == 0 {
			clean++
		} else {
			clean = 0
		}
		if clean >= 3 {
			r.progress("quiet after %v", time.Since(start).Round(time.Second))
			return nil
		}
		if time.Now().After(deadline) {
			r.note("quiet period: %v passed with %d sends unresolved and backlogs %v", r.cfg.Quiet, inflight, left)
			r.progress("quiet period over with %d sends unresolved, backlogs %v", inflight, left)
			return nil
		}
	}
}

// readBack reads every topic in every region from the earliest message
// with a reader, recording each message (KindRead). Only a cancelled run
// is an error.
func (r *runner) readBack(ctx context.Context) error {
	var wg sync.WaitGroup
	errs := make([]error, len(r.cl.shape.Regions)*len(r.topics))
	for i, reg := range r.cl.shape.Regions {
		for j, t := range r.topics {
			wg.Go(func() { errs[i*len(r.topics)+j] = r.readTopic(ctx, reg, t) })
		}
	}
	wg.Wait()
	if ctx.Err() != nil {
		return ctx.Err()
	}
	// A region whose topic cannot be read after the heal is a finding, not
	// an incomplete run: the checkers see that region without read-back
	// (lost, divergence).
	for _, err := range errs {
		if err != nil {
			r.note("%v", err)
			r.progress("%v", err)
		}
	}
	return nil
}

// readStall bounds the wait for the next message of a read-back that has
// not yet reached the topic's last stored entry; readTail ends a read-back
// that has (the rest of the last entry's batch, anything stored since).
const (
	readStall = time.Minute
	readTail  = 5 * time.Second
)

// readTopic reads topic in reg from the earliest message up to the last
// entry the topic had stored when the read began (its internal stats), so
// that a complete read-back holds every stored message: a message missing
// from it is missing from the region. A complete read-back ends with a
// "readback-complete" phase record for (reg, topic); an incomplete one is
// an error (the checkers then fall back to the region's deliveries).
func (r *runner) readTopic(ctx context.Context, reg, topic string) error {
	ictx, cancel := context.WithTimeout(ctx, 30*time.Second)
	st, err := r.admins[reg].TopicInternalStats(ictx, topic)
	cancel()
	if err != nil {
		return fmt.Errorf("read-back of %s in %s: internal stats: %w", topic, reg, err)
	}
	last := st.GetLastConfirmedEntry()
	complete := func(n int) error {
		r.rec.add(check.Record{Kind: check.KindPhase, Phase: check.PhaseReadBackComplete, Region: reg, Topic: topic})
		r.progress("read back %d messages of %s in %s", n, topic, reg)
		return nil
	}
	if last == nil || last.GetLedgerId() < 0 || last.GetEntryId() < 0 {
		return complete(0)
	}
	c, err := client.New(ctx, r.cfg.secure(client.Options{URL: joinAddrs(r.brokers[reg]), ConnectTimeout: 10 * time.Second, OperationTimeout: 20 * time.Second,
		MaxBackoff: time.Second, Logger: r.log.With("component", "reader", "region", reg)}))
	if err != nil {
		return fmt.Errorf("read-back of %s in %s: %w", topic, reg, err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = c.Close(cctx)
	}()
	octx, cancel := context.WithTimeout(ctx, time.Minute)
	rd, err := c.NewReader(octx, client.ReaderOptions{Topic: topic, Start: client.StartEarliest(), ReceiverQueueSize: 5000})
	cancel()
	if err != nil {
		return fmt.Errorf("read-back of %s in %s: %w", topic, reg, err)
	}
	lastID := client.MessageID{LedgerID: last.GetLedgerId(), EntryID: last.GetEntryId()}
	n, reached := 0, false
	for {
		wait := readStall
		if reached {
			wait = readTail
		}
		nctx, cancel := context.WithTimeout(ctx, wait)
		m, err := rd.Next(nctx)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if reached {
				return complete(n)
			}
			return fmt.Errorf("read-back of %s in %s: stalled for %v after %d messages, before the last stored entry %d:%d", topic, reg, wait, n, lastID.LedgerID, lastID.EntryID)
		}
		n++
		rec := check.Record{Kind: check.KindRead, Region: reg, Topic: topic, MsgID: m.ID.String(), Key: m.Key,
			StoredOrigin: m.OriginRegion, OriginID: m.OriginID}
		if id, origin, producer, seq, ok := ParsePayload(m.Payload); ok && id == r.cfg.ID {
			rec.Origin, rec.Producer, rec.Seq = origin, producer, seq
		} else {
			rec.Unparsed, rec.Payload = true, string(m.Payload[:min(len(m.Payload), 64)])
		}
		r.rec.add(rec)
		if m.ID.LedgerID > lastID.LedgerID || (m.ID.LedgerID == lastID.LedgerID && m.ID.EntryID >= lastID.EntryID) {
			reached = true
		}
	}
}
