package replicator

import (
	"errors"
	"fmt"
	"testing"
	"time"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
)

const (
	persisted = clientv1.ReplicateResult_REPLICATE_RESULT_PERSISTED
	duplicate = clientv1.ReplicateResult_REPLICATE_RESULT_DUPLICATE
	rejected  = clientv1.ReplicateResult_REPLICATE_RESULT_REJECTED
)

func ent(e int64, origin string, seq int64) Entry {
	return Entry{Pos: Position{1, e}, Data: make([]byte, 100), Origin: origin, OriginSeq: seq, Messages: 1}
}

func ackOf(r *request, res ...clientv1.ReplicateResult) *clientv1.ReplicateAck {
	if len(res) == 1 && len(r.items) > 1 {
		for len(res) < len(r.items) {
			res = append(res, res[0])
		}
	}
	return &clientv1.ReplicateAck{RequestId: r.id, Results: res}
}

func TestPipelineFilter(t *testing.T) {
	p := newPipeline("a", "b", Limits{}, Position{1, -1}, &clientv1.ReplicateOpened{
		Applied: map[string]int64{"a": 2, "c": 10}, Direct: []string{"d"}})
	cases := []struct {
		name string
		e    Entry
		want bool
	}{
		{"local new", ent(0, "a", 3), true},
		{"local already applied", ent(0, "a", 2), false},
		{"origin is the remote", ent(0, "b", 1), false},
		{"targets exclude the remote", Entry{Origin: "a", OriginSeq: 5, Targets: []string{"c"}}, false},
		{"targets include the remote", Entry{Origin: "a", OriginSeq: 5, Targets: []string{"c", "b"}}, true},
		{"replication disabled", Entry{Origin: "a", OriginSeq: 5, NoReplicate: true}, false},
		{"relay, origin not direct", ent(0, "c", 11), true},
		{"relay, already applied", ent(0, "c", 10), false},
		{"relay, origin direct (waits)", ent(0, "d", 1), false},
	}
	for _, c := range cases {
		if got := p.needsSending(&c.e); got != c.want {
			t.Errorf("%s: needsSending = %v, want %v", c.name, got, c.want)
		}
	}
}

func TestPipelineAdvancesOnlyOverPersistedPrefix(t *testing.T) {
	p := newPipeline("a", "b", Limits{RequestEntries: 2}, Position{1, -1}, &clientv1.ReplicateOpened{})
	var es []Entry
	for i := range int64(6) {
		es = append(es, ent(i, "a", i+1))
	}
	// Entry 2's origin is the remote: skipped without sending.
	es[2].Origin = "b"
	p.push(es)
	now := time.Now()
	r1, r2, r3 := p.next(now), p.next(now), p.next(now)
	if r1 == nil || r2 == nil || r3 == nil || p.next(now) != nil {
		t.Fatalf("want 3 requests of <=2 entries: %v %v %v", r1, r2, r3)
	}
	if len(r1.items) != 2 || r1.items[1].e.Pos.Entry != 1 || r2.items[0].e.Pos.Entry != 3 {
		t.Fatalf("request 1 = %d entries, request 2 starts at %v", len(r1.items), r2.items[0].e.Pos)
	}
	if _, ok := p.advance(); ok {
		t.Fatal("advanced before any ack")
	}
	// Acks out of order are a protocol error.
	if _, err := p.ack(ackOf(r2, persisted), now); !errors.Is(err, ErrProtocol) {
		t.Fatalf("ack of request 2 first: %v", err)
	}
	pr, err := p.ack(ackOf(r1, persisted, duplicate), now.Add(time.Millisecond))
	if err != nil || pr.Persisted != 1 || pr.Skipped != 1 {
		t.Fatalf("ack 1: %+v %v", pr, err)
	}
	at, ok := p.advance()
	if !ok || at != (Position{1, 2}) {
		t.Fatalf("advance = %v %v, want 1:2 (the skipped entry 2 included)", at, ok)
	}
	// Request 2: entry 3 persisted, entry 4 rejected: the cursor stops at 3.
	_, err = p.ack(ackOf(r2, persisted, rejected), now.Add(2*time.Millisecond))
	if !errors.Is(err, ErrRejected) {
		t.Fatalf("ack 2: %v, want ErrRejected", err)
	}
	at, ok = p.advance()
	if !ok || at != (Position{1, 3}) {
		t.Fatalf("advance after rejection = %v %v, want 1:3", at, ok)
	}
	if _, ok := p.advance(); ok {
		t.Fatal("advanced past the rejected entry")
	}
}

func TestPipelineWindowFollowsBandwidthDelay(t *testing.T) {
	p := newPipeline("a", "b", Limits{MinWindow: 1 << 20, MaxWindow: 64 << 20, RequestBytes: 1 << 20, RequestEntries: 1000}, Position{1, -1}, &clientv1.ReplicateOpened{})
	if p.win.size != 1<<20 {
		t.Fatalf("initial window %d", p.win.size)
	}
	// 100 ms round trips delivering 1 MiB every 10 ms (100 MiB/s): the
	// window must grow to the maximum (2 x 100 MiB/s x 0.1 s = 20 MiB).
	now := time.Now()
	var seq int64
	for range 400 {
		for p.canSend() {
			var es []Entry
			for range 10 {
				e := ent(seq, "a", seq+1)
				e.Data = make([]byte, 100<<10)
				es = append(es, e)
				seq++
			}
			p.push(es)
			if p.next(now) == nil {
				break
			}
		}
		now = now.Add(10 * time.Millisecond)
		for len(p.reqs) > 0 && now.Sub(p.reqs[0].sentAt) >= 100*time.Millisecond {
			if _, err := p.ack(ackOf(p.reqs[0], persisted), now); err != nil {
				t.Fatal(err)
			}
			p.advance()
		}
	}
	if p.win.size < 8<<20 {
		t.Fatalf("window %d after steady 100 MiB/s x 100 ms, want >= 8 MiB", p.win.size)
	}
	if p.win.size > 64<<20 {
		t.Fatalf("window %d above max", p.win.size)
	}
	t.Logf("window %d bytes, rtt %v", p.win.size, p.win.RTT())
}

// TestPipelineRelayWaitsForDirectOrigin: entries of an origin the remote
// reaches directly wait (the cursor does not pass them) until the remote
// applied them, and are sent, in origin order, when the origin's direct
// stream goes.
func TestPipelineRelayWaitsForDirectOrigin(t *testing.T) {
	p := newPipeline("a", "b", Limits{}, Position{1, -1}, &clientv1.ReplicateOpened{Direct: []string{"c"}})
	p.push([]Entry{ent(0, "c", 1), ent(1, "a", 1), ent(2, "c", 2), ent(3, "c", 3)})
	now := time.Now()
	r := p.next(now)
	if r == nil || len(r.items) != 1 || r.items[0].e.Origin != "a" {
		t.Fatalf("first request %v: want only a's entry", r)
	}
	if _, err := p.ack(&clientv1.ReplicateAck{RequestId: r.id, Results: []clientv1.ReplicateResult{persisted},
		Applied: map[string]int64{"a": 1, "c": 1}, Direct: []string{"c"}}, now); err != nil {
		t.Fatal(err)
	}
	// c's entry 1 is applied by the remote: done; 2 and 3 still wait.
	p.next(now)
	at, ok := p.advance()
	if !ok || at != (Position{1, 1}) {
		t.Fatalf("advance = %v %v, want 1:1", at, ok)
	}
	probe := p.probe(now, false)
	if probe == nil || len(probe.items) != 0 {
		t.Fatalf("want an empty probe while entries wait, got %v", probe)
	}
	// The remote lost c's direct stream: the relay sends c's 2 and 3, in order.
	if _, err := p.ack(&clientv1.ReplicateAck{RequestId: probe.id, Applied: map[string]int64{"a": 1, "c": 1}}, now); err != nil {
		t.Fatal(err)
	}
	// Waiting entries dropped their data: nothing is sent until the shell
	// reads them again (after their predecessor).
	if r := p.next(now); r != nil {
		t.Fatalf("sent released entries without data: %v", r)
	}
	miss := p.missingData()
	if len(miss) != 2 || miss[0].prev != (Position{1, 1}) || miss[1].prev != (Position{1, 2}) {
		t.Fatalf("missing data: %d entries", len(miss))
	}
	for _, it := range miss {
		p.setData(it, []byte("reloaded"))
	}
	r = p.next(now)
	if r == nil || len(r.items) != 2 || r.items[0].e.OriginSeq != 2 || r.items[1].e.OriginSeq != 3 {
		t.Fatalf("after c left direct: request %v, want c's 2 and 3", r)
	}
	if _, err := p.ack(ackOf(r, persisted), now); err != nil {
		t.Fatal(err)
	}
	if at, ok := p.advance(); !ok || at != (Position{1, 3}) {
		t.Fatalf("advance = %v %v, want 1:3", at, ok)
	}
}

// TestPipelineReportsEntriesNotForTheRemote (issue 20 item 6): entries
// kept out of the remote by replicate_to or disable_replication are not
// sent but reported, per origin stream, as merged origin_seq ranges in the
// request; the cursor passes them only once the request is answered (the
// remote then holds the report), whatever the results of its entries.
func TestPipelineReportsEntriesNotForTheRemote(t *testing.T) {
	p := newPipeline("a", "b", Limits{}, Position{1, -1}, &clientv1.ReplicateOpened{})
	only := func(e Entry, targets ...string) Entry { e.Targets = targets; return e }
	local := func(e Entry) Entry { e.NoReplicate = true; return e }
	relayed := ent(6, "c", 7)
	relayed.Stream = "c@2"
	p.push([]Entry{
		ent(0, "a", 1),
		only(ent(1, "a", 2), "c"), local(ent(2, "a", 3)), only(ent(3, "a", 4), "a"), // 2..4 not for b
		ent(4, "a", 5),
		only(ent(5, "a", 6), "b", "c"), // for b
		only(relayed, "c"),             // a relayed entry of c@2, not for b
		local(ent(7, "a", 7)),
	})
	now := time.Now()
	r := p.next(now)
	if r == nil || p.next(now) != nil {
		t.Fatalf("want one request, got %v", r)
	}
	if len(r.items) != 3 {
		t.Fatalf("sent %d entries, want 3 (seqs 1, 5, 6)", len(r.items))
	}
	var got []string
	for _, s := range r.toProto().GetEntries().GetSkipped() {
		got = append(got, fmt.Sprintf("%s:%d-%d", s.GetStream(), s.GetFirst(), s.GetLast()))
	}
	if want := "[a:2-4 c@2:7-7 a:7-7]"; fmt.Sprint(got) != want {
		t.Fatalf("skipped = %v, want %s", got, want)
	}
	if _, ok := p.advance(); ok {
		t.Fatal("the cursor moved before the report was answered")
	}
	if _, err := p.ack(ackOf(r, persisted, persisted, rejected), now); !errors.Is(err, ErrRejected) {
		t.Fatalf("ack: %v", err)
	}
	// Seqs 1 and 2..4 are done (reported and answered), 5 persisted, 6
	// rejected: the cursor stops before 6.
	if at, ok := p.advance(); !ok || at != (Position{1, 4}) {
		t.Fatalf("advance = %v %v, want 1:4", at, ok)
	}
}
