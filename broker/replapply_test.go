package broker_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
	"github.com/meridianmq/meridian/broker"
	"github.com/meridianmq/meridian/internal/wire"
	"github.com/meridianmq/meridian/region/regiontest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// R is a shorthand for the replicate results in expectations.
const (
	rP = clientv1.ReplicateResult_REPLICATE_RESULT_PERSISTED
	rD = clientv1.ReplicateResult_REPLICATE_RESULT_DUPLICATE
	rG = clientv1.ReplicateResult_REPLICATE_RESULT_GAP
	rR = clientv1.ReplicateResult_REPLICATE_RESULT_REJECTED
)

// replEntryBytes is a stored entry as a replicator ships it: one message
// "<origin>-<seq>" (S2), origin fields set.
func replEntryBytes(t *testing.T, origin string, seq int64) []byte {
	t.Helper()
	body, size, err := wire.EncodeBatch(&clientv1.Batch{Messages: []*clientv1.SingleMessage{{Key: "k", Payload: fmt.Appendf(nil, "%s-%d", origin, seq)}}},
		clientv1.CompressionType_COMPRESSION_TYPE_S2)
	if err != nil {
		t.Fatal(err)
	}
	md := &clientv1.EntryMetadata{ProducerName: "p-" + origin, SequenceId: seq, HighestSequenceId: seq, NumMessages: 1,
		Compression: clientv1.CompressionType_COMPRESSION_TYPE_S2, UncompressedSize: size, PublishTimeMs: time.Now().UnixMilli(),
		OriginRegion: origin, OriginLedgerId: 100, OriginEntryId: seq - 1, OriginSeq: seq}
	data, err := wire.EncodeEntry(md, body)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func replRange(t *testing.T, origin string, from, to int64) [][]byte {
	var out [][]byte
	for s := from; s <= to; s++ {
		out = append(out, replEntryBytes(t, origin, s))
	}
	return out
}

type replStream struct {
	t      *testing.T
	st     clientv1.Replication_ReplicateClient
	cancel context.CancelFunc
	nextID int64
}

// openRepl opens a raw replication stream to addr; it returns the opened
// answer or the error that ended the stream.
func openRepl(t *testing.T, addr, topic, source, target string) (*replStream, *clientv1.ReplicateOpened, error) {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	st, err := clientv1.NewReplicationClient(cc).Replicate(ctx)
	if err != nil {
		cancel()
		return nil, nil, err
	}
	if err := st.Send(&clientv1.ReplicateRequest{Kind: &clientv1.ReplicateRequest_Open{Open: &clientv1.ReplicateOpen{
		Topic: topic, SourceRegion: source, TargetRegion: target}}}); err != nil {
		cancel()
		return nil, nil, err
	}
	r, err := st.Recv()
	if err != nil {
		cancel()
		return nil, nil, err
	}
	t.Cleanup(cancel)
	return &replStream{t: t, st: st, cancel: cancel, nextID: 1}, r.GetOpened(), nil
}

// mustOpenRepl opens a stream, retrying while the topic moves.
func mustOpenRepl(t *testing.T, addr, topic, source, target string) (*replStream, *clientv1.ReplicateOpened) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		rs, op, err := openRepl(t, addr, topic, source, target)
		if err == nil {
			return rs, op
		}
		if time.Now().After(deadline) {
			t.Fatalf("open replication stream to %s: %v", addr, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// send queues one request and returns its ID.
func (r *replStream) send(ents [][]byte) (int64, error) {
	id := r.nextID
	r.nextID++
	return id, r.st.Send(&clientv1.ReplicateRequest{Kind: &clientv1.ReplicateRequest_Entries{Entries: &clientv1.ReplicateEntries{RequestId: id, Entries: ents}}})
}

func (r *replStream) ack() (*clientv1.ReplicateAck, error) {
	resp, err := r.st.Recv()
	if err != nil {
		return nil, err
	}
	return resp.GetAck(), nil
}

// roundTrip sends one request and waits for its ack.
func (r *replStream) roundTrip(ents [][]byte) *clientv1.ReplicateAck {
	r.t.Helper()
	id, err := r.send(ents)
	if err != nil {
		r.t.Fatalf("send request %d: %v", id, err)
	}
	a, err := r.ack()
	if err != nil {
		r.t.Fatalf("ack of request %d: %v", id, err)
	}
	if a.GetRequestId() != id {
		r.t.Fatalf("ack for request %d, want %d", a.GetRequestId(), id)
	}
	return a
}

func wantResults(t *testing.T, what string, a *clientv1.ReplicateAck, want ...clientv1.ReplicateResult) {
	t.Helper()
	got := a.GetResults()
	ok := len(got) == len(want)
	for i := 0; ok && i < len(want); i++ {
		ok = got[i] == want[i]
	}
	if !ok {
		t.Fatalf("%s: results %v (error %v), want %v", what, got, a.GetError(), want)
	}
}

// storedMessage is one message read back from a topic.
type storedMessage struct {
	origin     string
	seq        int64
	payload    string
	replicated bool
}

// readAll reads n messages of topic from the earliest (subscription sub)
// and checks that the topic stores exactly n entries.
func readAll(t *testing.T, cli clientv1.MeridianClient, adm clientv1.AdminClient, topic, sub string, n int) []storedMessage {
	t.Helper()
	c := subscribe(t, cli, topic, sub, clientv1.SubscriptionType_SUBSCRIPTION_TYPE_EXCLUSIVE)
	defer c.cancel()
	var out []storedMessage
	for len(out) < n {
		r, err := c.st.Recv()
		if err != nil {
			t.Fatalf("read %d of %d: %v", len(out), n, err)
		}
		m := r.GetMessage()
		if m == nil {
			continue
		}
		b, err := wire.DecodeBatch(m.Metadata, m.Payload)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, storedMessage{m.Metadata.GetOriginRegion(), m.Metadata.GetOriginSeq(), string(b.Messages[0].Payload), m.Metadata.GetReplicated()})
	}
	st, err := adm.GetTopicStats(context.Background(), &clientv1.GetTopicStatsRequest{Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	if st.Entries != int64(n) {
		t.Fatalf("topic stores %d entries, want %d", st.Entries, n)
	}
	return out
}

// checkOrigins asserts that msgs hold exactly origin seqs 1..want[origin]
// once each, in order per origin, stored as replicated with the payload
// as shipped.
func checkOrigins(t *testing.T, msgs []storedMessage, want map[string]int64) {
	t.Helper()
	next := map[string]int64{}
	for _, m := range msgs {
		if !m.replicated {
			t.Fatalf("entry %v stored without replicated=true", m)
		}
		next[m.origin]++
		if m.seq != next[m.origin] || m.payload != fmt.Sprintf("%s-%d", m.origin, m.seq) {
			t.Fatalf("origin %s: got seq %d payload %q, want seq %d (duplicate, loss or reorder)", m.origin, m.seq, m.payload, next[m.origin])
		}
	}
	for o, n := range want {
		if next[o] != n {
			t.Fatalf("origin %s: %d entries stored, want %d", o, next[o], n)
		}
	}
}

// TestReplicateIdempotentApply: duplicates are dropped and answered
// DUPLICATE, the receiver's own origin is never stored, a relayed gap is
// GAP, entries are stored once each in per-origin order with
// replicated=true, and opened/ack report applied and direct.
func TestReplicateIdempotentApply(t *testing.T) {
	cli, adm, rc := oneBroker(t, nil)
	ctx := context.Background()
	topic := "public/default/repl-apply"
	createTopicWithSub(t, ctx, adm, topic, "check")
	addr := rc.Addrs()[0]
	rs, op := mustOpenRepl(t, addr, topic, "a", "test")
	if len(op.GetApplied()) != 0 || strings.Join(op.GetDirect(), ",") != "a" {
		t.Fatalf("opened: applied %v direct %v", op.GetApplied(), op.GetDirect())
	}
	wantResults(t, "first", rs.roundTrip(replRange(t, "a", 1, 5)), rP, rP, rP, rP, rP)
	a := rs.roundTrip(replRange(t, "a", 3, 7))
	wantResults(t, "resend overlapping", a, rD, rD, rD, rP, rP)
	if a.GetApplied()["a"] != 7 {
		t.Fatalf("applied %v, want a=7", a.GetApplied())
	}
	// Our own region's entries never come back as new entries.
	wantResults(t, "own origin", rs.roundTrip([][]byte{replEntryBytes(t, "test", 1), replEntryBytes(t, "test", 2)}), rD, rD)
	// Relayed entries of origin b (source a): contiguous only.
	a = rs.roundTrip([][]byte{replEntryBytes(t, "b", 1), replEntryBytes(t, "b", 3), replEntryBytes(t, "b", 2), replEntryBytes(t, "b", 2)})
	wantResults(t, "relay", a, rP, rG, rP, rD)
	if a.GetApplied()["a"] != 7 || a.GetApplied()["b"] != 2 || strings.Join(a.GetDirect(), ",") != "a" {
		t.Fatalf("after relay: applied %v direct %v", a.GetApplied(), a.GetDirect())
	}
	// A relayed origin may start only at 1.
	wantResults(t, "relay start", rs.roundTrip([][]byte{replEntryBytes(t, "c", 5)}), rG)
	// A direct origin may skip (entries not meant for this region).
	wantResults(t, "direct skip", rs.roundTrip([][]byte{replEntryBytes(t, "a", 9)}), rP)
	wantResults(t, "below highest", rs.roundTrip([][]byte{replEntryBytes(t, "a", 8)}), rD)
	// A second stream from b: direct lists both while both are open.
	rs2, op2 := mustOpenRepl(t, addr, topic, "b", "test")
	if strings.Join(op2.GetDirect(), ",") != "a,b" || op2.GetApplied()["b"] != 2 {
		t.Fatalf("second stream opened: applied %v direct %v", op2.GetApplied(), op2.GetDirect())
	}
	wantResults(t, "b direct", rs2.roundTrip(replRange(t, "b", 2, 4)), rD, rP, rP)
	rs2.cancel()

	msgs := readAll(t, cli, adm, topic, "check", 7+1+4)
	var a7 []storedMessage
	for _, m := range msgs {
		if m.origin == "a" && m.seq <= 7 || m.origin == "b" {
			a7 = append(a7, m)
		}
	}
	checkOrigins(t, a7, map[string]int64{"a": 7, "b": 4})
	last := msgs[len(msgs)-1]
	for _, m := range msgs {
		if m.origin == "a" && m.seq == 9 {
			last = m
		}
	}
	if last.seq != 9 {
		t.Fatalf("a-9 not stored: %v", msgs)
	}
	// Every result is counted per origin.
	resp, err := http.Get("http://" + rc.Broker(0).HTTPAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`meridian_replication_received_entries_total{origin="a",result="persisted"} 8`,
		`meridian_replication_received_entries_total{origin="a",result="duplicate"} 4`,
		`meridian_replication_received_entries_total{origin="b",result="gap"} 1`,
		`meridian_replication_received_entries_total{origin="test",result="duplicate"} 2`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	// The pseudo-producer names are reserved.
	st, err := cli.Produce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_ = st.Send(&clientv1.ProduceRequest{Kind: &clientv1.ProduceRequest_Open{Open: &clientv1.OpenProducer{Topic: topic, ProducerName: "meridian.repl.a"}}})
	if _, err := st.Recv(); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("producer named meridian.repl.a: %v, want InvalidArgument", err)
	}
}

// TestReplicateRefusesBadInput: a bad open or a bad entry ends the stream
// with INVALID_ARGUMENT naming the field, and nothing of the request is
// stored.
func TestReplicateRefusesBadInput(t *testing.T) {
	cli, adm, rc := oneBroker(t, nil)
	ctx := context.Background()
	topic := "public/default/repl-bad"
	createTopicWithSub(t, ctx, adm, topic, "check")
	addr := rc.Addrs()[0]
	if _, _, err := openRepl(t, addr, topic, "a", "elsewhere"); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "target_region") {
		t.Fatalf("wrong target region: %v", err)
	}
	if _, _, err := openRepl(t, addr, topic, "a b", "test"); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "source_region") {
		t.Fatalf("bad source region: %v", err)
	}
	noSeq := replEntryBytes(t, "a", 2)
	md, payload, _ := wire.DecodeEntry(noSeq)
	md.OriginSeq = 0
	noSeq, _ = wire.EncodeEntry(md, payload)
	md.OriginSeq, md.OriginRegion = 2, ""
	noOrigin, _ := wire.EncodeEntry(md, payload)
	for _, c := range []struct {
		name  string
		entry []byte
		field string
	}{
		{"bad bytes", []byte("not an entry"), "entries[1]"},
		{"no origin_seq", noSeq, "entries[1].origin_seq"},
		{"no origin_region", noOrigin, "entries[1].origin_region"},
	} {
		rs, _ := mustOpenRepl(t, addr, topic, "a", "test")
		if _, err := rs.send([][]byte{replEntryBytes(t, "a", 1), c.entry}); err != nil {
			t.Fatal(err)
		}
		_, err := rs.ack()
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), c.field) {
			t.Fatalf("%s: %v, want InvalidArgument naming %s", c.name, err, c.field)
		}
		t.Logf("%s: %v", c.name, err)
	}
	st, err := adm.GetTopicStats(ctx, &clientv1.GetTopicStatsRequest{Topic: topic})
	if err != nil || st.Entries != 0 {
		t.Fatalf("bad requests stored %d entries (%v)", st.GetEntries(), err)
	}
	_ = cli
}

// TestReplicatePipelined: many requests in flight on one stream, each
// overlapping the one before (resends of entries still being stored): acks
// come in request order, a duplicate is answered only once its original
// is persisted, and every entry is stored once.
func TestReplicatePipelined(t *testing.T) {
	cli, adm, rc := oneBroker(t, func(c *broker.Config) { c.RolloverEntries = 40 })
	ctx := context.Background()
	topic := "public/default/repl-pipe"
	createTopicWithSub(t, ctx, adm, topic, "check")
	rs, _ := mustOpenRepl(t, rc.Addrs()[0], topic, "a", "test")
	const reqs, per = 60, 10
	go func() {
		for k := range int64(reqs) {
			// Request k carries a:5k+1 .. a:5k+10: half of it repeats the
			// previous request, which is still in flight.
			if _, err := rs.send(replRange(t, "a", 5*k+1, 5*k+per)); err != nil {
				return
			}
		}
	}()
	persisted, dups := 0, 0
	for k := range int64(reqs) {
		a, err := rs.ack()
		if err != nil {
			t.Fatalf("ack %d: %v", k+1, err)
		}
		if a.GetRequestId() != k+1 {
			t.Fatalf("ack for request %d, want %d (order)", a.GetRequestId(), k+1)
		}
		for i, r := range a.GetResults() {
			switch r {
			case rP:
				persisted++
			case rD:
				dups++
			default:
				t.Fatalf("request %d entry %d: %v (%v)", k+1, i, r, a.GetError())
			}
		}
	}
	n := 5*(reqs-1) + per
	if persisted != n {
		t.Fatalf("%d entries persisted, want %d", persisted, n)
	}
	t.Logf("acknowledged %d persisted, %d duplicates", persisted, dups)
	checkOrigins(t, readAll(t, cli, adm, topic, "check", n), map[string]int64{"a": int64(n)})
}

// TestReplicateSurvivesUnloadAndKill: the highest applied origin_seq
// survives an unload of the topic mid-stream and a crash of the owning
// broker: resends are answered DUPLICATE and nothing is stored twice.
func TestReplicateSurvivesUnloadAndKill(t *testing.T) {
	rc := regiontest.Start(t, regiontest.Options{Brokers: 2, Bookies: 3})
	ctx := context.Background()
	topic := "public/default/repl-moves"
	_, adm0 := conn(t, rc.Addrs()[0])
	createTopicWithSub(t, ctx, adm0, topic, "check")
	owner := func(string) string {
		return regiontest.LookupOwner(t, rc.Addrs()[0], topic, func(string) bool { return true })
	}
	acked := int64(0) // highest origin_seq answered PERSISTED or DUPLICATE
	persisted, dups := 0, 0
	next := int64(1)
	// pump sends batches of 5 pipelined from the highest acknowledged on,
	// until want is acknowledged or the stream ends; the action runs once
	// after the first few acks.
	pump := func(addr string, want int64, action func()) {
		rs, op, err := openRepl(t, addr, topic, "a", "test")
		if err != nil {
			t.Logf("open: %v", err)
			time.Sleep(100 * time.Millisecond)
			return
		}
		if op.GetApplied()["a"] < acked {
			t.Fatalf("opened reports applied %d, but %d were acknowledged", op.GetApplied()["a"], acked)
		}
		defer rs.cancel()
		next = acked + 1
		sent := 0
		done := make(chan struct{})
		defer close(done)
		window := make(chan struct{}, 4) // requests in flight
		go func() {
			for s := next; s <= want; s += 5 {
				select {
				case <-done:
					return
				case window <- struct{}{}:
				}
				if _, err := rs.send(replRange(t, "a", s, min(s+4, want))); err != nil {
					return
				}
			}
		}()
		for s := next; s <= want; s += 5 {
			a, err := rs.ack()
			if err != nil {
				t.Logf("stream ended at %d: %v", acked, err)
				return
			}
			<-window
			for i, r := range a.GetResults() {
				seq := s + int64(i)
				switch r {
				case rP, rD:
					if seq != acked+1 {
						t.Fatalf("acknowledged %d after %d", seq, acked)
					}
					acked = seq
					if r == rP {
						persisted++
					} else {
						dups++
					}
				case rR:
					t.Logf("rejected from %d: %v", seq, a.GetError())
					return
				default:
					t.Fatalf("result %v for a direct entry", r)
				}
			}
			if sent++; sent == 3 && action != nil {
				action()
				action = nil
			}
		}
	}
	// A broker that does not own the topic redirects to the owner.
	addr := owner("")
	other := rc.Addrs()[1-indexOf(rc.Addrs(), addr)]
	_, _, err := openRepl(t, other, topic, "a", "test")
	if redirect := redirectOf(err); status.Code(err) != codes.FailedPrecondition || redirect != addr {
		t.Fatalf("open on the non-owner: %v (redirect %q), want TOPIC_NOT_OWNED redirecting to %s", err, redirect, addr)
	}
	// Unload mid-stream (while requests are in flight).
	_, adm := conn(t, addr)
	unloaded := false
	for acked < 100 {
		var act func()
		if !unloaded {
			act = func() {
				if _, err := adm.UnloadTopic(ctx, &clientv1.UnloadTopicRequest{Topic: topic}); err != nil {
					t.Logf("unload: %v", err)
				}
			}
			unloaded = true
		}
		pump(owner(""), 100, act)
	}
	// Resend everything from 1: all duplicates.
	rs, op := mustOpenRepl(t, owner(""), topic, "a", "test")
	if op.GetApplied()["a"] != 100 {
		t.Fatalf("after unload applied %v, want 100", op.GetApplied())
	}
	a := rs.roundTrip(replRange(t, "a", 1, 20))
	for i, r := range a.GetResults() {
		if r != rD {
			t.Fatalf("resend of %d after unload: %v", i+1, r)
		}
	}
	rs.cancel()
	// Kill the owner mid-stream (regiontest Kill: nothing flushed or
	// released; the other broker takes the topic once the session expires).
	cur := owner("")
	killIdx := indexOf(rc.Addrs(), cur)
	pump(cur, 200, func() { rc.Kill(killIdx) })
	other = rc.Addrs()[1-killIdx]
	newOwner := ""
	for acked < 200 {
		newOwner = regiontest.LookupOwner(t, other, topic, func(o string) bool { return o != cur })
		pump(newOwner, 200, nil)
	}
	newOwner = regiontest.LookupOwner(t, other, topic, func(o string) bool { return o != cur })
	rs, op = mustOpenRepl(t, newOwner, topic, "a", "test")
	if op.GetApplied()["a"] != 200 {
		t.Fatalf("after kill applied %v, want 200", op.GetApplied())
	}
	wantResults(t, "resend after kill", rs.roundTrip(replRange(t, "a", 198, 200)), rD, rD, rD)
	cli, adm2 := conn(t, newOwner)
	checkOrigins(t, readAll(t, cli, adm2, topic, "check", 200), map[string]int64{"a": 200})
	t.Logf("acknowledged 200 (persisted answers %d, duplicate answers %d); stored 200", persisted, dups)
}

func indexOf(xs []string, x string) int {
	for i, v := range xs {
		if v == x {
			return i
		}
	}
	return -1
}

// redirectOf returns the redirect_url of a TOPIC_NOT_OWNED status.
func redirectOf(err error) string {
	st, _ := status.FromError(err)
	for _, d := range st.Details() {
		if e, ok := d.(*clientv1.Error); ok && e.GetCode() == clientv1.ErrorCode_ERROR_CODE_TOPIC_NOT_OWNED {
			return e.GetRedirectUrl()
		}
	}
	return ""
}

// TestReplicateConcurrentSourcesKeepOriginOrder: origin a's entries reach
// the receiver at once from a itself and from a relay c: every entry is
// stored once, in a's order, whichever stream delivered it.
func TestReplicateConcurrentSourcesKeepOriginOrder(t *testing.T) {
	cli, adm, rc := oneBroker(t, nil)
	ctx := context.Background()
	topic := "public/default/repl-two-sources"
	createTopicWithSub(t, ctx, adm, topic, "check")
	const n = 200
	type tally struct{ persisted, dup, gap int }
	run := func(source string, out chan<- tally) {
		rs, _, err := openRepl(t, rc.Addrs()[0], topic, source, "test")
		if err != nil {
			t.Errorf("open from %s: %v", source, err)
			out <- tally{}
			return
		}
		var tl tally
		for s := int64(1); s <= n; s += 4 {
			id, err := rs.send(replRange(t, "a", s, s+3))
			if err != nil {
				t.Errorf("%s: send: %v", source, err)
				break
			}
			a, err := rs.ack()
			if err != nil || a.GetRequestId() != id {
				t.Errorf("%s: ack %d: %v %v", source, id, a, err)
				break
			}
			for _, r := range a.GetResults() {
				switch r {
				case rP:
					tl.persisted++
				case rD:
					tl.dup++
				case rG:
					tl.gap++
				default:
					t.Errorf("%s: %v (%v)", source, r, a.GetError())
				}
			}
		}
		out <- tl
	}
	res := make(chan tally, 2)
	go run("a", res)
	go run("c", res)
	t1, t2 := <-res, <-res
	if t.Failed() {
		return
	}
	if t1.persisted+t2.persisted != n {
		t.Fatalf("persisted %d + %d, want %d in all", t1.persisted, t2.persisted, n)
	}
	t.Logf("streams: %+v and %+v", t1, t2)
	checkOrigins(t, readAll(t, cli, adm, topic, "check", n), map[string]int64{"a": n})
}

// TestReplicateDirectGoesStale: a stream that carries nothing for longer
// than a replicator's idle probe period stops counting as direct (it is
// probably behind a cut link whose close has not arrived), so relays do
// not wait on it; a request makes it direct again.
func TestReplicateDirectGoesStale(t *testing.T) {
	_, adm, rc := oneBroker(t, nil)
	ctx := context.Background()
	topic := "public/default/repl-direct-stale"
	createTopicWithSub(t, ctx, adm, topic, "check")
	addr := rc.Addrs()[0]
	rs, op := mustOpenRepl(t, addr, topic, "a", "test")
	if strings.Join(op.GetDirect(), ",") != "a" {
		t.Fatalf("opened: direct %v, want a", op.GetDirect())
	}
	other, _ := mustOpenRepl(t, addr, topic, "c", "test")
	// a stays silent; c keeps probing and watches a's status.
	waitFor(t, "a no longer direct while silent", func() bool {
		a := other.roundTrip(nil)
		return !slices.Contains(a.GetDirect(), "a") && slices.Contains(a.GetDirect(), "c")
	})
	if a := rs.roundTrip(nil); !slices.Contains(a.GetDirect(), "a") {
		t.Fatalf("direct after a's probe: %v, want a listed", a.GetDirect())
	}
}
