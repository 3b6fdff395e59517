package broker_test

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
	"github.com/meridianmq/meridian/broker"
	"github.com/meridianmq/meridian/internal/wire"
)

// TestReplicateRefusesForgedOriginJump: a direct entry whose origin_seq
// jumps far above the next one of its origin stream (one forged entry near
// 2^63) is REJECTED with an error naming origin_region and the limit, and
// the mark does not move: the real stream continues with every entry
// stored once (before, the forged entry was stored and every later real
// entry came back a silent DUPLICATE). A jump over numbers reported as
// skipped (entries not for this region) and a small unreported one (within
// replication.max_origin_seq_jump) are still accepted.
func TestReplicateRefusesForgedOriginJump(t *testing.T) {
	cli, adm, rc := oneBroker(t, func(c *broker.Config) { c.Replication.MaxOriginSeqJump = 10 })
	ctx := context.Background()
	topic := "public/default/repl-forged-jump"
	createTopicWithSub(t, ctx, adm, topic, "all")
	addr := rc.Addrs()[0]
	send := func(rs *replStream, ents [][]byte, skipped ...int64) *clientv1.ReplicateAck {
		t.Helper()
		id := rs.nextID
		rs.nextID++
		var sk []*clientv1.SkippedSeqs
		for i := 0; i+1 < len(skipped); i += 2 {
			sk = append(sk, &clientv1.SkippedSeqs{Stream: "a", First: skipped[i], Last: skipped[i+1]})
		}
		if err := rs.st.Send(&clientv1.ReplicateRequest{Kind: &clientv1.ReplicateRequest_Entries{Entries: &clientv1.ReplicateEntries{
			RequestId: id, Entries: ents, Skipped: sk}}}); err != nil {
			t.Fatal(err)
		}
		a, err := rs.ack()
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	real, _ := mustOpenRepl(t, addr, topic, "a", "test")
	wantResults(t, "real 1..5", send(real, replRange(t, "a", 1, 5)), rP, rP, rP, rP, rP)

	// The forger, on its own stream as region a.
	forger, _ := mustOpenRepl(t, addr, topic, "a", "test")
	a := send(forger, [][]byte{replEntryBytes(t, "a", math.MaxInt64-1)})
	wantResults(t, "forged jump", a, rR)
	if msg := a.GetError().GetMessage(); !strings.Contains(msg, `origin_region "a"`) || !strings.Contains(msg, "max_origin_seq_jump") {
		t.Fatalf("forged jump error %v: want it to name origin_region and max_origin_seq_jump", a.GetError())
	}
	if a.GetApplied()["a"] != 5 {
		t.Fatalf("applied after the forged jump: %v, want a=5", a.GetApplied())
	}
	// The same jump covered by a forged skip report of only a few numbers
	// is still refused.
	wantResults(t, "forged jump with a short skip report", send(forger, [][]byte{replEntryBytes(t, "a", 1<<40)}, 6, 100), rR)
	forger.cancel()

	// The real stream continues: 6..8 stored, a jump over reported skips
	// (9..1000, not for this region) and a small unreported one (within 10)
	// are accepted.
	wantResults(t, "real 6..8", send(real, replRange(t, "a", 6, 8)), rP, rP, rP)
	wantResults(t, "reported skip", send(real, [][]byte{replEntryBytes(t, "a", 1001)}, 9, 1000), rP)
	wantResults(t, "small unreported jump", send(real, [][]byte{replEntryBytes(t, "a", 1005)}), rP)
	a = send(real, replRange(t, "a", 1006, 1007))
	wantResults(t, "real after", a, rP, rP)
	if a.GetApplied()["a"] != 1007 {
		t.Fatalf("applied %v, want a=1007", a.GetApplied())
	}
	// Each real entry stored exactly once, nothing of the forger.
	want := []int64{1, 2, 3, 4, 5, 6, 7, 8, 1001, 1005, 1006, 1007}
	msgs := readAll(t, cli, adm, topic, "all", len(want))
	for i, m := range msgs {
		if m.seq != want[i] || m.payload != fmt.Sprintf("a-%d", want[i]) {
			t.Fatalf("stored entry %d: %+v, want origin_seq %d", i, m, want[i])
		}
	}
}

// TestReplicateOriginJumpStrict: with replication.max_origin_seq_jump -1
// a direct entry passing even one unreported number is REJECTED, one
// passing only reported numbers is stored, and a new incarnation of the
// origin starts at 1.
func TestReplicateOriginJumpStrict(t *testing.T) {
	_, adm, rc := oneBroker(t, func(c *broker.Config) { c.Replication.MaxOriginSeqJump = -1 })
	ctx := context.Background()
	topic := "public/default/repl-jump-strict"
	createTopicWithSub(t, ctx, adm, topic, "all")
	rs, _ := mustOpenRepl(t, rc.Addrs()[0], topic, "a", "test")
	wantResults(t, "1..2", rs.roundTrip(replRange(t, "a", 1, 2)), rP, rP)
	wantResults(t, "unreported jump of one", rs.roundTrip([][]byte{replEntryBytes(t, "a", 4)}), rR)
	rs.cancel()
	rs, _ = mustOpenRepl(t, rc.Addrs()[0], topic, "a", "test")
	id := rs.nextID
	rs.nextID++
	if err := rs.st.Send(&clientv1.ReplicateRequest{Kind: &clientv1.ReplicateRequest_Entries{Entries: &clientv1.ReplicateEntries{
		RequestId: id, Entries: [][]byte{replEntryBytes(t, "a", 4)}, Skipped: []*clientv1.SkippedSeqs{{Stream: "a", First: 3, Last: 3}}}}}); err != nil {
		t.Fatal(err)
	}
	a, err := rs.ack()
	if err != nil {
		t.Fatal(err)
	}
	wantResults(t, "reported jump", a, rP)
	// A new incarnation of a: a new origin stream, from 1.
	md, payload, err := wire.DecodeEntry(replEntryBytes(t, "a", 1))
	if err != nil {
		t.Fatal(err)
	}
	md.OriginIncarnation = 7
	data, err := wire.EncodeEntry(md, payload)
	if err != nil {
		t.Fatal(err)
	}
	a = rs.roundTrip([][]byte{data})
	wantResults(t, "new incarnation", a, rP)
	if a.GetApplied()["a"] != 4 || a.GetApplied()["a@7"] != 1 {
		t.Fatalf("applied %v, want a=4 a@7=1", a.GetApplied())
	}
}
