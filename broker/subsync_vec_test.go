package broker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
	"github.com/meridianmq/meridian/broker"
	"github.com/meridianmq/meridian/internal/wire"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// Ack vectors bounded, shipped as deltas (issue 20 item 6).

// ownRanges is a vector of the broker's own origin stream: ranges as
// first,last pairs.
func ownRanges(stream string, md int64, ranges ...int64) *clientv1.AckVector {
	o := &clientv1.OriginAcks{MarkDeleteSeq: md}
	for i := 0; i+1 < len(ranges); i += 2 {
		o.Acked = append(o.Acked, &clientv1.SeqRange{First: ranges[i], Last: ranges[i+1]})
	}
	return &clientv1.AckVector{Origins: map[string]*clientv1.OriginAcks{stream: o}}
}

// singletons returns first,last pairs [from, from], [from+step, ...], n of
// them.
func singletons(from, step int64, n int) []int64 {
	out := make([]int64, 0, 2*n)
	for i := range int64(n) {
		out = append(out, from+i*step, from+i*step)
	}
	return out
}

// replicatedSub creates topic (one entry) and its replicated subscription
// sub, retaining everything.
func replicatedSub(t *testing.T, cli clientv1.MeridianClient, adm clientv1.AdminClient, ns, topic, sub string) {
	t.Helper()
	keepAll(t, adm, ns)
	p, _ := openProducer(t, cli, topic, "p")
	p.sendOK(0)
	if _, err := adm.CreateSubscription(context.Background(), &clientv1.CreateSubscriptionRequest{Topic: topic, Subscription: sub,
		InitialPosition: clientv1.InitialPosition_INITIAL_POSITION_EARLIEST, Replicated: true}); err != nil {
		t.Fatal(err)
	}
}

// vectorSize is the wire size of the updates' vectors.
func vectorSize(ups []*clientv1.SubscriptionUpdate) int {
	n := 0
	for _, u := range ups {
		n += proto.Size(u.GetVector())
	}
	return n
}

// seqRanges counts the ranges of an update's vector, over every key.
func seqRanges(v *clientv1.AckVector) int {
	n := 0
	for _, o := range v.GetOrigins() {
		n += len(o.GetAcked())
	}
	for _, sa := range v.GetScoped() {
		for _, o := range sa.GetOrigins() {
			n += len(o.GetAcked())
		}
	}
	return n
}

// TestSubscriptionSenderShipsDeltas: a sender ships a subscription's
// whole vector once, then only what changed since what the remote holds
// or has in flight: nothing with no new acknowledgement, one value for one
// acknowledgement however large the vector. A refused request is shipped
// again (as a delta from what the remote confirmed), and the whole vector
// goes again every full_sync_interval.
func TestSubscriptionSenderShipsDeltas(t *testing.T) {
	const fullSync = 2 * time.Second
	cli, adm, rc := oneBroker(t, func(c *broker.Config) { c.Subscriptions.FullSyncInterval = fullSync })
	srv := rc.Broker(0)
	topic := "public/deltas/t"
	replicatedSub(t, cli, adm, "public/deltas", topic, "rs")
	stream := broker.OwnStreamForTesting(srv, topic)
	// 2000 holes: seqs 2, 4, ..., 4000 acknowledged.
	if err := broker.JoinVectorForTesting(srv, topic, "rs", ownRanges(stream, 0, singletons(2, 2, 2000)...)); err != nil {
		t.Fatal(err)
	}
	f, err := broker.NewSenderForTesting(srv, topic, "zz")
	if err != nil {
		t.Fatal(err)
	}
	// whole reports whether an update carries the whole vector (not a
	// delta); one may come at any time after full_sync_interval since the
	// last (fullAt: taken before the sender's own clock reading).
	fullAt := time.Now()
	whole := func(u *clientv1.SubscriptionUpdate) bool { return seqRanges(u.GetVector()) >= 1900 }
	ups := f.Collect()
	if len(ups) != 1 || !whole(ups[0]) {
		t.Fatalf("first request: %d updates, want the whole vector of rs (2000 ranges)", len(ups))
	}
	f.Confirm("")
	periodic := func(u *clientv1.SubscriptionUpdate) bool {
		if !whole(u) {
			return false
		}
		if time.Since(fullAt) < fullSync {
			t.Fatalf("the whole vector shipped again %v after the last, before full_sync_interval %v", time.Since(fullAt), fullSync)
		}
		fullAt = time.Now()
		return true
	}
	if ups := f.Collect(); len(ups) != 0 && !periodic(ups[0]) {
		t.Fatalf("nothing changed: %d updates shipped (%d bytes)", len(ups), vectorSize(ups))
	}
	f.Confirm("")
	// 20 acknowledgements one at a time, each filling a hole: each ships
	// one value.
	var deltaBytes, wholeBytes int
	for k := range int64(20) {
		seq := 2*k + 3
		if err := broker.JoinVectorForTesting(srv, topic, "rs", ownRanges(stream, 0, seq, seq)); err != nil {
			t.Fatal(err)
		}
		ups := f.Collect()
		v, err := broker.VectorProtoForTesting(srv, topic, "rs")
		if err != nil {
			t.Fatal(err)
		}
		if len(ups) != 1 {
			t.Fatalf("ack of %d: %d updates, want 1", seq, len(ups))
		}
		f.Confirm("")
		if periodic(ups[0]) {
			continue
		}
		o := ups[0].GetVector().GetOrigins()[stream]
		if n := seqRanges(ups[0].GetVector()); n != 1 || o.GetMarkDeleteSeq() > 0 || o.GetAcked()[0].GetFirst() != seq || o.GetAcked()[0].GetLast() != seq {
			t.Fatalf("ack of %d: the update carries %d ranges (md %d), want only the new value", seq, n, o.GetMarkDeleteSeq())
		}
		deltaBytes += vectorSize(ups)
		wholeBytes += proto.Size(v)
	}
	t.Logf("20 acknowledgements on a vector of ~2000 ranges: %d bytes shipped as deltas, %d bytes as whole vectors", deltaBytes, wholeBytes)
	if deltaBytes*100 > wholeBytes {
		t.Fatalf("deltas shipped %d bytes, whole vectors %d: want less than 1%%", deltaBytes, wholeBytes)
	}
	// A refused request: its change goes again with the next request.
	if err := broker.JoinVectorForTesting(srv, topic, "rs", ownRanges(stream, 0, 101, 101)); err != nil {
		t.Fatal(err)
	}
	if ups := f.Collect(); len(ups) != 1 {
		t.Fatalf("%d updates, want 1", len(ups))
	}
	f.Confirm("refused")
	ups = f.Collect()
	if len(ups) != 1 {
		t.Fatalf("after a refusal: %d updates, want the refused change again", len(ups))
	}
	if !periodic(ups[0]) {
		o := ups[0].GetVector().GetOrigins()[stream]
		if len(o.GetAcked()) != 1 || o.GetAcked()[0].GetFirst() != 101 {
			t.Fatalf("after a refusal: %v, want the refused change again as a delta", ups[0].GetVector())
		}
	}
	f.Confirm("")
	// The whole vector again after full_sync_interval, with no change.
	time.Sleep(time.Until(fullAt.Add(fullSync + 100*time.Millisecond)))
	ups = f.Collect()
	if len(ups) != 1 || !whole(ups[0]) {
		t.Fatalf("after full_sync_interval: %d updates, want the whole vector", len(ups))
	}
}

// cursorCover decodes the cover ranges of a stored cursor record.
func cursorCover(t *testing.T, rec []byte) (ranges int) {
	t.Helper()
	var r struct {
		Cover map[string]struct {
			R [][2]int64 `json:"r"`
		} `json:"cover"`
	}
	if err := json.Unmarshal(rec, &r); err != nil {
		t.Fatal(err)
	}
	for _, o := range r.Cover {
		ranges += len(o.R)
	}
	return ranges
}

// metricSum sums a metric's samples on the broker's /metrics.
func metricSum(t *testing.T, srv *broker.Server, name string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + srv.HTTPAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	sum := 0.0
	for _, l := range strings.Split(string(body), "\n") {
		if !strings.HasPrefix(l, name+" ") && !strings.HasPrefix(l, name+"{") {
			continue
		}
		f := strings.Fields(l)
		v, _ := strconv.ParseFloat(f[len(f)-1], 64)
		sum += v
	}
	return sum
}

// cursorInfo returns the internal stats of a subscription's cursor.
func cursorInfo(t *testing.T, adm clientv1.AdminClient, topic, sub string) *clientv1.CursorInfo {
	t.Helper()
	st, err := adm.GetTopicInternalStats(context.Background(), &clientv1.GetTopicInternalStatsRequest{Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range st.GetCursors() {
		if c.GetName() == sub {
			return c
		}
	}
	t.Fatalf("no cursor %s", sub)
	return nil
}

// TestAckVectorBoundPersists: a vector with more holes than the 1 MiB
// metadata limit could hold (70 000, as entries kept out of a region once
// left) is cut to subscriptions.max_ack_vector_bytes, counted, and its
// cursor persists and ships; a received vector past the bound is refused
// naming the field and changes nothing.
func TestAckVectorBoundPersists(t *testing.T) {
	cli, adm, rc := oneBroker(t, nil)
	srv := rc.Broker(0)
	topic := "public/bound/t"
	replicatedSub(t, cli, adm, "public/bound", topic, "rs")
	stream := broker.OwnStreamForTesting(srv, topic)
	// 70 000 singleton ranges of 6-digit seqs: about 1.1 MB as a record.
	huge := ownRanges(stream, 0, singletons(100000, 2, 70000)...)
	if err := broker.JoinVectorForTesting(srv, topic, "rs", huge); err != nil {
		t.Fatal(err)
	}
	ci := cursorInfo(t, adm, topic, "rs")
	if ci.GetAckVectorBytes() > broker.DefaultMaxAckVectorBytes || ci.GetAckVectorRanges() < 1000 {
		t.Fatalf("vector: %d ranges, %d bytes; want within %d bytes, its lowest ranges kept", ci.GetAckVectorRanges(), ci.GetAckVectorBytes(), broker.DefaultMaxAckVectorBytes)
	}
	if n := metricSum(t, srv, "meridian_subscription_ack_vector_dropped_total"); n < 1 {
		t.Fatalf("meridian_subscription_ack_vector_dropped_total = %v, want > 0", n)
	}
	waitFor(t, "the cursor record persisted with the bounded vector", func() bool {
		rec, err := broker.CursorRecordForTesting(srv, topic, "rs")
		return err == nil && len(rec) < 1<<20 && int64(cursorCover(t, rec)) == ci.GetAckVectorRanges()
	})
	// It ships: the whole vector is accepted by a receiver with the same
	// bound (a subscription created from it).
	f, err := broker.NewSenderForTesting(srv, topic, "zz")
	if err != nil {
		t.Fatal(err)
	}
	ups := f.Collect()
	if len(ups) != 1 {
		t.Fatalf("%d updates, want 1", len(ups))
	}
	ups[0].Subscription = "rs2"
	if err := broker.ApplySubUpdateForTesting(srv, topic, "zz", ups[0]); err != nil {
		t.Fatalf("the bounded vector was refused: %v", err)
	}
	// A received vector past the bound is refused whole.
	err = broker.ApplySubUpdateForTesting(srv, topic, "zz", &clientv1.SubscriptionUpdate{Subscription: "rs2", Vector: huge})
	if !errors.Is(err, broker.ErrInvalidArgument) || !strings.Contains(err.Error(), "subscriptions.max_ack_vector_bytes") {
		t.Fatalf("vector past the bound: %v, want INVALID_ARGUMENT naming subscriptions.max_ack_vector_bytes", err)
	}
	if got := cursorInfo(t, adm, topic, "rs2").GetAckVectorRanges(); got != ci.GetAckVectorRanges() {
		t.Fatalf("the refused vector changed rs2: %d ranges, want %d", got, ci.GetAckVectorRanges())
	}
}

// ackAll acknowledges ids individually, in one request.
func ackAll(t *testing.T, c *testConsumer, ids []*clientv1.MessageId) {
	t.Helper()
	if err := c.st.Send(&clientv1.ConsumeRequest{Kind: &clientv1.ConsumeRequest_Ack{Ack: &clientv1.Ack{MessageIds: ids, RequestId: 7}}}); err != nil {
		t.Fatal(err)
	}
	for {
		r, err := c.st.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if ar := r.GetAckResponse(); ar != nil {
			if ar.GetError() != nil {
				t.Fatal(ar.GetError())
			}
			return
		}
	}
}

// TestAckVectorBoundRedeliversNeverLoses: past the bound a subscription's
// vector forgets its highest acknowledgements; moved elsewhere (its
// shipped vector applied to a subscription that has none), it delivers
// every message not acknowledged, and of the acknowledged ones only those
// the bound dropped (duplicates, never a loss).
func TestAckVectorBoundRedeliversNeverLoses(t *testing.T) {
	cli, adm, rc := oneBroker(t, func(c *broker.Config) { c.Subscriptions.MaxAckVectorBytes = 4096 })
	srv := rc.Broker(0)
	keepAll(t, adm, "public/bounddel")
	topic := "public/bounddel/t"
	p, _ := openProducer(t, cli, topic, "p")
	const n = 1000
	for i := range int64(n) {
		p.sendOK(i) // origin_seq i+1, payload m<i>
	}
	req := &clientv1.Subscribe{Topic: topic, Subscription: "rs", Type: clientv1.SubscriptionType_SUBSCRIPTION_TYPE_SHARED,
		InitialPosition: clientv1.InitialPosition_INITIAL_POSITION_EARLIEST, Replicated: true}
	c := subscribeWith(t, cli, req, n)
	var odd []*clientv1.MessageId
	for range n {
		id, m := c.next()
		if i, _ := strconv.Atoi(strings.TrimPrefix(m, "m")); i%2 == 1 {
			odd = append(odd, id) // seqs 2, 4, ...: 500 holes
		}
	}
	ackAll(t, c, odd)
	waitFor(t, "the acknowledgements translated and the vector bounded", func() bool {
		ci := cursorInfo(t, adm, topic, "rs")
		return ci.GetAckVectorRanges() > 100 && metricSum(t, srv, "meridian_subscription_ack_vector_dropped_total") > 0
	})
	ci := cursorInfo(t, adm, topic, "rs")
	if ci.GetAckVectorBytes() > 4096 {
		t.Fatalf("vector %d bytes, bound 4096", ci.GetAckVectorBytes())
	}
	c.cancel()
	f, err := broker.NewSenderForTesting(srv, topic, "zz")
	if err != nil {
		t.Fatal(err)
	}
	ups := f.Collect()
	if len(ups) != 1 {
		t.Fatalf("%d updates, want 1", len(ups))
	}
	kept := ups[0].GetVector()
	ups[0].Subscription = "moved"
	if err := broker.ApplySubUpdateForTesting(srv, topic, "zz", ups[0]); err != nil {
		t.Fatal(err)
	}
	acked := map[int]bool{}
	for _, o := range kept.GetOrigins() {
		for _, r := range o.GetAcked() {
			for s := r.GetFirst(); s <= r.GetLast(); s++ {
				acked[int(s)-1] = true // payload index = seq - 1
			}
		}
	}
	want := n/2 + (len(odd) - len(acked)) // every even one, and the odd ones dropped
	c2 := subscribeWith(t, cli, &clientv1.Subscribe{Topic: topic, Subscription: "moved", Type: clientv1.SubscriptionType_SUBSCRIPTION_TYPE_SHARED}, n)
	got := map[int]bool{}
	for range want {
		_, m := c2.next()
		i, _ := strconv.Atoi(strings.TrimPrefix(m, "m"))
		if acked[i] {
			t.Fatalf("message %d delivered: acknowledged and in the shipped vector", i)
		}
		got[i] = true
	}
	for i := 0; i < n; i += 2 {
		if !got[i] {
			t.Fatalf("message %d, never acknowledged, was not delivered", i)
		}
	}
	t.Logf("%d acknowledgements, %d kept in the bounded vector, %d delivered again", len(odd), len(acked), len(odd)-len(acked))
}

// TestSubscriptionsConfigBounds: the subscriptions limits default when
// zero and are refused, naming the field and the limit, when out of range.
func TestSubscriptionsConfigBounds(t *testing.T) {
	if err := (broker.SubscriptionsConfig{}).Validate(); err != nil {
		t.Fatalf("zero config: %v", err)
	}
	for _, c := range []struct {
		cfg  broker.SubscriptionsConfig
		want string
	}{
		{broker.SubscriptionsConfig{MaxAckVectorBytes: 100}, "subscriptions.max_ack_vector_bytes"},
		{broker.SubscriptionsConfig{MaxAckVectorBytes: 1 << 30}, "subscriptions.max_ack_vector_bytes"},
		{broker.SubscriptionsConfig{MaxVectorBatchSeqs: -1}, "subscriptions.max_vector_batch_seqs"},
		{broker.SubscriptionsConfig{MaxVectorBatchWords: -1}, "subscriptions.max_vector_batch_words"},
		{broker.SubscriptionsConfig{FullSyncInterval: time.Millisecond}, "subscriptions.full_sync_interval"},
		{broker.SubscriptionsConfig{MaxSkipRangesPerStream: -1}, "subscriptions.max_skip_ranges_per_stream"},
	} {
		err := c.cfg.Validate()
		if !errors.Is(err, broker.ErrInvalidArgument) || !strings.Contains(err.Error(), c.want) {
			t.Fatalf("%+v: %v, want INVALID_ARGUMENT naming %s", c.cfg, err, c.want)
		}
	}
}

// TestReplicateRecordsEntriesNotForThisRegion (issue 20 item 6): skip
// reports of a replication stream are stored with the next entry of their
// origin stream (origin_skipped_before, this region's own count whatever
// the shipped entry carried; unreported gaps never count), and a
// replicated subscription acknowledging those entries holds no hole for
// the reported values — in its scoped claim, never as an exact one.
func TestReplicateRecordsEntriesNotForThisRegion(t *testing.T) {
	cli, adm, rc := oneBroker(t, nil)
	srv := rc.Broker(0)
	keepAll(t, adm, "public/notfor")
	topic := "public/notfor/t"
	createTopicWithSub(t, context.Background(), adm, topic, "rs")
	if _, err := adm.DeleteSubscription(context.Background(), &clientv1.DeleteSubscriptionRequest{Topic: topic, Subscription: "rs"}); err != nil {
		t.Fatal(err)
	}
	if _, err := adm.CreateSubscription(context.Background(), &clientv1.CreateSubscriptionRequest{Topic: topic, Subscription: "rs",
		InitialPosition: clientv1.InitialPosition_INITIAL_POSITION_EARLIEST, Replicated: true}); err != nil {
		t.Fatal(err)
	}
	rs, _ := mustOpenRepl(t, rc.Addrs()[0], topic, "x", broker.RegionForTesting(srv))
	send := func(ents [][]byte, skipped ...int64) *clientv1.ReplicateAck {
		t.Helper()
		id := rs.nextID
		rs.nextID++
		var sk []*clientv1.SkippedSeqs
		for i := 0; i+1 < len(skipped); i += 2 {
			sk = append(sk, &clientv1.SkippedSeqs{Stream: "x", First: skipped[i], Last: skipped[i+1]})
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
	// A relay's copy of x:8 carrying its own region's count (99).
	relayed := func() []byte {
		md, payload, _ := wire.DecodeEntry(replEntryBytes(t, "x", 8))
		md.OriginSkippedBefore = 99
		b, _ := wire.EncodeEntry(md, payload)
		return b
	}()
	wantResults(t, "x:1, x:5 after 2..4", send([][]byte{replEntryBytes(t, "x", 1), replEntryBytes(t, "x", 5)}, 2, 4), rP, rP)
	wantResults(t, "6..7 reported alone", send(nil, 6, 7))
	wantResults(t, "x:8", send([][]byte{relayed}), rP)
	wantResults(t, "x:10, 9 not reported", send([][]byte{replEntryBytes(t, "x", 10)}), rP)
	c := subscribeWith(t, cli, &clientv1.Subscribe{Topic: topic, Subscription: "rs", Type: clientv1.SubscriptionType_SUBSCRIPTION_TYPE_EXCLUSIVE,
		InitialPosition: clientv1.InitialPosition_INITIAL_POSITION_EARLIEST, Replicated: true}, 10)
	var ids []*clientv1.MessageId
	got := map[int64]int64{}
	for range 4 {
		r, err := c.st.Recv()
		for err == nil && r.GetMessage() == nil {
			r, err = c.st.Recv()
		}
		if err != nil {
			t.Fatal(err)
		}
		m := r.GetMessage()
		got[m.Metadata.GetOriginSeq()] = m.Metadata.GetOriginSkippedBefore()
		ids = append(ids, m.MessageId)
	}
	if want := map[int64]int64{1: 0, 5: 3, 8: 2, 10: 0}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("origin_skipped_before by origin_seq: %v, want %v", got, want)
	}
	ackAll(t, c, ids)
	key := broker.RegionForTesting(srv) + ">x"
	waitFor(t, "the acknowledgements in the scoped claim: 1..8, then 10", func() bool {
		v, _, err := broker.VectorForTesting(srv, topic, "rs")
		return err == nil && fmt.Sprint(v[key]) == "[8 10 10]" && v["x"] == nil
	})
	// A bad report ends the stream, naming the field.
	if err := rs.st.Send(&clientv1.ReplicateRequest{Kind: &clientv1.ReplicateRequest_Entries{Entries: &clientv1.ReplicateEntries{
		RequestId: rs.nextID, Skipped: []*clientv1.SkippedSeqs{{Stream: "x", First: 5, Last: 4}}}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := rs.ack(); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "skipped[0]") {
		t.Fatalf("bad skip report: %v, want InvalidArgument naming skipped[0]", err)
	}
}
