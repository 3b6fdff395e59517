package replicator

import (
	"testing"
	"time"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
)

// TestPipelineRelayWaitIsBounded: relay b ships to remote c the entries of
// origin a, which has a live direct stream to c that is connected but
// slow (it delivers one entry per 200 ms tick while b reads 20). The relay
// holds a's entries only up to MaxRelayWait, and the memory of the held
// entries never passes MaxHeldBytes; past either bound it sends them, in a's
// order. Every entry reaches c (0 lost), each within MaxRelayWait plus a
// tick of being read, nothing arrives out of order (the receiver's
// in-sequence rule: no GAP), the duplicates of a's own slow stream are
// counted, and the cursor reaches the end. Before, the relay held a's
// entries for as long as a stayed connected (up to 1M entries), so they
// arrived only at a's slow pace.
func TestPipelineRelayWaitIsBounded(t *testing.T) {
	const tick = 200 * time.Millisecond
	for _, tc := range []struct {
		name     string
		wait     time.Duration
		heldEnts int64 // MaxHeldBytes in waiting entries
		// byTime: the time bound releases (else the byte bound does while
		// the log grows, and the time bound the last entries).
		byTime bool
	}{
		{"time", 2 * time.Second, 1 << 20, true},
		{"bytes", 10 * time.Second, 60, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cost := (&item{e: Entry{Origin: "a"}}).heldCost()
			lim := Limits{MaxRelayWait: tc.wait, MaxHeldBytes: tc.heldEnts * cost}
			p := newPipeline("b", "c", lim, Position{1, -1}, &clientv1.ReplicateOpened{Direct: []string{"a"}})
			data := map[Position][]byte{}
			readAt := map[int64]time.Time{}
			var remoteApplied, originNext, originDups, relayDups int64
			worst := time.Duration(0)
			t0 := time.Unix(1000, 0)
			const steps, perStep = 150, 20
			total := int64(0)
			applyUpTo := func(seq int64, now time.Time) {
				for s := remoteApplied + 1; s <= seq; s++ {
					worst = max(worst, now.Sub(readAt[s]))
				}
				remoteApplied = max(remoteApplied, seq)
			}
			for step := 0; step < steps+200; step++ {
				now := t0.Add(time.Duration(step) * tick)
				// a's own stream: one entry per tick.
				if originNext < total {
					originNext++
					if originNext <= remoteApplied {
						originDups++
					} else {
						applyUpTo(originNext, now)
					}
				}
				// b's log grows (for the first steps).
				if step < steps {
					var es []Entry
					for range perStep {
						total++
						e := ent(total-1, "a", total)
						data[e.Pos] = e.Data
						readAt[total] = now
						es = append(es, e)
					}
					p.push(es)
				}
				// The shell: read released entries again, send, and get
				// each request answered at once.
				for range 1000 {
					for _, it := range p.missingData() {
						p.setData(it, data[it.e.Pos])
					}
					r := p.next(now)
					if r == nil {
						if r = p.probe(now, false); r == nil {
							break
						}
					}
					res := make([]clientv1.ReplicateResult, len(r.items))
					for i, it := range r.items {
						switch s := it.e.OriginSeq; {
						case s <= remoteApplied:
							res[i] = duplicate
							relayDups++
						case s == remoteApplied+1:
							res[i] = persisted
							applyUpTo(s, now)
						default:
							t.Fatalf("relayed a's %d while c holds up to %d: out of a's order (GAP)", s, remoteApplied)
						}
					}
					if _, err := p.ack(&clientv1.ReplicateAck{RequestId: r.id, Results: res,
						Applied: map[string]int64{"a": remoteApplied}, Direct: []string{"a"}}, now); err != nil {
						t.Fatal(err)
					}
					if p.heldBytes > lim.MaxHeldBytes {
						t.Fatalf("held %d bytes, limit %d", p.heldBytes, lim.MaxHeldBytes)
					}
				}
				if p.heldBytes > lim.MaxHeldBytes {
					t.Fatalf("held %d bytes, limit %d", p.heldBytes, lim.MaxHeldBytes)
				}
				p.advance()
			}
			if remoteApplied != total {
				t.Fatalf("c holds a's entries up to %d of %d: lost", remoteApplied, total)
			}
			if at, _ := p.advance(); len(p.queue) != 0 && at != (Position{1, total - 1}) {
				t.Fatalf("cursor not at the end: %d entries queued", len(p.queue))
			}
			bound := tc.wait + tick
			if worst > bound {
				t.Fatalf("an entry reached c %v after it was read, bound %v", worst, bound)
			}
			if tc.byTime && p.relayedByTime == 0 || !tc.byTime && p.relayedByBytes == 0 {
				t.Fatalf("relayed early by time %d, by bytes %d", p.relayedByTime, p.relayedByBytes)
			}
			t.Logf("%d entries; worst delivery %v (bound %v); relayed early by time %d, by bytes %d; duplicates: a's stream %d, relay %d",
				total, worst, bound, p.relayedByTime, p.relayedByBytes, originDups, relayDups)
		})
	}
}
