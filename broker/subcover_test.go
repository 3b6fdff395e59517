package broker_test

import (
	"context"
	"fmt"
	"testing"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
	"github.com/meridianmq/meridian/broker"
)

// subBacklog returns the backlog of subscription sub of topic.
func subBacklog(t *testing.T, adm clientv1.AdminClient, topic, sub string) int64 {
	t.Helper()
	st, err := adm.GetTopicStats(context.Background(), &clientv1.GetTopicStatsRequest{Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range st.Subscriptions {
		if s.Name == sub {
			return s.BacklogEntries
		}
	}
	t.Fatalf("subscription %s not in stats", sub)
	return 0
}

// TestCoverVectorSeekAndScan: a cover vector set by seekVector acknowledges
// the entries it covers without any consumer (apply scan: the backlog
// follows), the dispatcher never delivers a covered entry, and a cover that
// grows while entries are delivered and unacknowledged acknowledges them
// (a reconnecting consumer gets only the rest).
func TestCoverVectorSeekAndScan(t *testing.T) {
	cli, adm, rc := oneBroker(t, func(c *broker.Config) { c.RolloverEntries = 7 })
	ctx := context.Background()
	topic := "public/default/cover"
	createTopicWithSub(t, ctx, adm, topic, "s")
	p, _ := openProducer(t, cli, topic, "p")
	for i := range int64(20) {
		p.sendOK(i) // local origin_seq i+1, payload m<i>
	}
	srv := rc.Broker(0)
	// No consumer: seek to a vector covering seqs 1..5, 8 and 10..12.
	if err := broker.SeekVectorForTesting(srv, topic, "s", [][2]int64{{1, 5}, {8, 8}, {10, 12}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "backlog 11 after the seek (apply scan without a consumer)", func() bool { return subBacklog(t, adm, topic, "s") == 11 })
	c := subscribe(t, cli, topic, "s", clientv1.SubscriptionType_SUBSCRIPTION_TYPE_SHARED)
	// Payload m<i> has seq i+1: uncovered are m5, m6, m8 and m12..m19.
	want := []string{"m5", "m6", "m8", "m12", "m13", "m14", "m15", "m16", "m17", "m18", "m19"}
	for i, w := range want {
		if _, got := c.next(); got != w {
			t.Fatalf("delivery %d: got %s, want %s", i, got, w)
		}
	}
	// Nothing acknowledged; the cover grows over seqs 6..16 (m5..m15):
	// they are acknowledged while pending, the backlog follows.
	if err := broker.JoinCoverForTesting(srv, topic, "s", [][2]int64{{6, 16}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "backlog 4 after the cover grew over pending entries", func() bool { return subBacklog(t, adm, topic, "s") == 4 })
	c.cancel()
	c2 := subscribe(t, cli, topic, "s", clientv1.SubscriptionType_SUBSCRIPTION_TYPE_SHARED)
	var got []string
	for range 4 {
		_, m := c2.next()
		got = append(got, m)
	}
	if fmt.Sprint(got) != "[m16 m17 m18 m19]" {
		t.Fatalf("after reconnect got %v, want [m16 m17 m18 m19]", got)
	}
	// The acknowledgements made by the cover are persisted like any other:
	// after an unload the backlog is the same.
	if _, err := adm.UnloadTopic(ctx, &clientv1.UnloadTopicRequest{Topic: topic}); err != nil {
		t.Fatal(err)
	}
	c2.cancel()
	waitFor(t, "backlog 4 after unload", func() bool {
		st, err := adm.GetTopicStats(ctx, &clientv1.GetTopicStatsRequest{Topic: topic})
		if err != nil {
			return false
		}
		for _, s := range st.Subscriptions {
			if s.Name == "s" {
				return s.BacklogEntries == 4
			}
		}
		return false
	})
}

// TestCoverScanLargeBacklog: a seek over a backlog larger than one scan
// step and one round's read budget is applied in slices and rounds, with
// no consumer, and survives a rollover of ledgers in between.
func TestCoverScanLargeBacklog(t *testing.T) {
	cli, adm, rc := oneBroker(t, func(c *broker.Config) { c.RolloverEntries = 700 })
	ctx := context.Background()
	// Everything is retained: the replicated subscription created at the
	// end must find the whole log.
	if _, err := adm.CreateNamespace(ctx, &clientv1.CreateNamespaceRequest{Namespace: "public/coverbig",
		Policies: &clientv1.NamespacePolicies{RetentionTimeSeconds: -1, RetentionSizeBytes: -1}}); err != nil {
		t.Fatal(err)
	}
	topic := "public/coverbig/t"
	createTopicWithSub(t, ctx, adm, topic, "s")
	p, _ := openProducer(t, cli, topic, "p")
	const n = 4500
	// Pipelined sends: all requests first, then the receipts.
	for i := range int64(n) {
		if err := p.st.Send(sendRequest(i, fmt.Appendf(nil, "m%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	for i := range n {
		r, err := p.st.Recv()
		if err != nil || r.GetReceipt().GetError() != nil {
			t.Fatalf("receipt %d: %v %v", i, r, err)
		}
	}
	// Cover seqs 1..4000 but 2500 and 3999: 502 left.
	if err := broker.SeekVectorForTesting(rc.Broker(0), topic, "s", [][2]int64{{1, 2499}, {2501, 3998}, {4000, 4000}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "backlog 502 after the seek", func() bool { return subBacklog(t, adm, topic, "s") == 502 })
	c := subscribe(t, cli, topic, "s", clientv1.SubscriptionType_SUBSCRIPTION_TYPE_EXCLUSIVE)
	for _, w := range []string{"m2499", "m3998", "m4000"} {
		if _, got := c.next(); got != w {
			t.Fatalf("got %s, want %s", got, w)
		}
	}
	// A replicated subscription: one cumulative ack over the whole log is
	// translated in slices.
	r := subscribeWith(t, cli, &clientv1.Subscribe{Topic: topic, Subscription: "r", Type: clientv1.SubscriptionType_SUBSCRIPTION_TYPE_EXCLUSIVE,
		InitialPosition: clientv1.InitialPosition_INITIAL_POSITION_EARLIEST, Replicated: true}, 5000)
	var last *clientv1.MessageId
	for i := range n {
		var m string
		if last, m = r.next(); m != fmt.Sprintf("m%d", i) {
			t.Fatalf("replicated subscription: delivery %d is %s", i, m)
		}
	}
	if e := r.ack(last, true); e != nil {
		t.Fatal(e)
	}
	vectorIs(t, rc.Broker(0), topic, "r", []int64{n})
}
