package broker_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/meridianmq/meridian/broker"
	"github.com/meridianmq/meridian/chaos/check"
	"github.com/meridianmq/meridian/metadata"
)

// TestReplicateUnsafeSkipOriginCheck: a replicated entry resent after a
// reconnect is answered DUPLICATE and stored once; with the test-only
// unsafe_skip_origin_check it is stored twice, and the chaos checkers
// (duplicated: a replicated copy stored twice) catch it from the two
// regions' read-backs.
func TestReplicateUnsafeSkipOriginCheck(t *testing.T) {
	for _, unsafe := range []bool{false, true} {
		name := "safe"
		if unsafe {
			name = "unsafe"
		}
		t.Run(name, func(t *testing.T) {
			cli, adm, rc := oneBroker(t, func(c *broker.Config) {
				c.FaultInjection = unsafe
				c.UnsafeSkipOriginCheck = unsafe
			})
			ctx := context.Background()
			topic := "public/default/repl-unsafe"
			createTopicWithSub(t, ctx, adm, topic, "check")
			addr := rc.Addrs()[0]
			rs, _ := mustOpenRepl(t, addr, topic, "a", "test")
			wantResults(t, "first", rs.roundTrip(replRange(t, "a", 1, 3)), rP, rP, rP)
			// The replicator reconnects (its stream ended before it saw
			// the answers) and resends from 2.
			rs.cancel()
			rs2, _ := mustOpenRepl(t, addr, topic, "a", "test")
			want, stored := []any{rD, rD}, 3
			if unsafe {
				want, stored = []any{rP, rP}, 5
			}
			a := rs2.roundTrip(replRange(t, "a", 2, 3))
			if len(a.GetResults()) != 2 || a.GetResults()[0] != want[0] || a.GetResults()[1] != want[1] {
				t.Fatalf("resend after reconnect: results %v, want %v", a.GetResults(), want)
			}
			msgs := readAll(t, cli, adm, topic, "check", stored)
			// The checkers' view: region a (the origin) holds 1..3 once;
			// region "test" holds what this broker stores.
			recs := []check.Record{{Kind: check.KindRun, Run: &check.Run{ID: "u", Regions: []string{"a", "test"}, Topics: []string{topic}}}}
			for seq := int64(1); seq <= 3; seq++ {
				m := check.Record{Region: "a", Origin: "a", Producer: "p-a", Seq: seq, Topic: topic, T: time.Now()}
				for _, k := range []check.Kind{check.KindSend, check.KindAck, check.KindRead} {
					m.Kind = k
					recs = append(recs, m)
				}
			}
			for _, m := range msgs {
				recs = append(recs, check.Record{Kind: check.KindRead, Region: "test", Origin: m.origin, Producer: "p-a", Seq: m.seq, Topic: topic, T: time.Now()})
			}
			v := check.Check(check.History{Records: recs}, check.Options{})
			r, _ := v.Result(check.CheckDuplicated)
			t.Logf("stored %d entries; duplicated: pass %v count %d: %s %q", len(msgs), r.Pass, r.Count, r.Detail, r.Examples)
			if r.Pass == unsafe || v.Valid == unsafe {
				t.Fatalf("unsafe %v: checkers valid %v, duplicated pass %v", unsafe, v.Valid, r.Pass)
			}
			if lost, _ := v.Result(check.CheckLost); !lost.Pass {
				t.Fatalf("lost: %+v", lost)
			}
			if unsafe && r.Count != 2 {
				t.Fatalf("duplicated count %d, want 2 (a-2 and a-3 stored twice)", r.Count)
			}
		})
	}
}

// TestUnsafeSkipOriginCheckRequiresFaultInjection: the unsafe mode is
// refused, naming the field, unless fault injection is on.
func TestUnsafeSkipOriginCheckRequiresFaultInjection(t *testing.T) {
	c := broker.DefaultConfig()
	c.Region = "a"
	c.Global, c.Regional = struct{ metadata.Store }{}, struct{ metadata.Store }{}
	c.Ledgers = struct{ broker.LedgerStore }{}
	if err := c.Validate(); err != nil {
		t.Fatalf("base config: %v", err)
	}
	c.UnsafeSkipOriginCheck = true
	err := c.Validate()
	if !errors.Is(err, broker.ErrInvalidArgument) || !strings.Contains(err.Error(), "unsafe_skip_origin_check requires fault_injection") {
		t.Fatalf("unsafe without fault_injection: %v", err)
	}
	c.FaultInjection = true
	if err := c.Validate(); err != nil {
		t.Fatalf("unsafe with fault_injection: %v", err)
	}
}
