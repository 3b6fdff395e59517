package broker_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
	"github.com/meridianmq/meridian/broker"
)

// subscribeWith opens a consumer with the given Subscribe request and
// grants permits (0: none, so nothing is delivered).
func subscribeWith(t *testing.T, cli clientv1.MeridianClient, sub *clientv1.Subscribe, permits uint32) *testConsumer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	st, err := cli.Consume(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&clientv1.ConsumeRequest{Kind: &clientv1.ConsumeRequest_Subscribe{Subscribe: sub}}); err != nil {
		t.Fatal(err)
	}
	r, err := st.Recv()
	if err != nil || r.GetSubscribed() == nil {
		t.Fatalf("subscribe %s: %v %v", sub.GetSubscription(), r, err)
	}
	if permits > 0 {
		if err := st.Send(&clientv1.ConsumeRequest{Kind: &clientv1.ConsumeRequest_Flow{Flow: &clientv1.Flow{Permits: permits}}}); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(cancel)
	return &testConsumer{t: t, st: st, cancel: cancel}
}

// keepAll creates namespace ns retaining everything (retention forever):
// these tests create subscriptions after producing, and the default
// namespace's retention would delete ledgers no subscription holds yet.
func keepAll(t *testing.T, adm clientv1.AdminClient, ns string) {
	t.Helper()
	if _, err := adm.CreateNamespace(context.Background(), &clientv1.CreateNamespaceRequest{Namespace: ns,
		Policies: &clientv1.NamespacePolicies{RetentionTimeSeconds: -1, RetentionSizeBytes: -1}}); err != nil {
		t.Fatal(err)
	}
}

// vectorIs waits until the subscription's vector for the broker's own
// region is want (mark-delete, then range bounds).
func vectorIs(t *testing.T, srv *broker.Server, topic, sub string, want []int64) {
	t.Helper()
	region := broker.OwnStreamForTesting(srv, topic)
	var last any
	deadline := time.Now().Add(30 * time.Second)
	for {
		v, repl, err := broker.VectorForTesting(srv, topic, sub)
		if err == nil && repl && fmt.Sprint(v[region]) == fmt.Sprint(want) {
			return
		}
		last = fmt.Sprintf("%v replicated=%v err=%v", v, repl, err)
		if time.Now().After(deadline) {
			t.Fatalf("vector of %s: %v, want %s: %v", sub, last, region, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestReplicatedSubscriptionVector: local acknowledgements become the
// subscription's origin vector exactly — individual acks as ranges, a
// cumulative ack as the mark-delete — it survives an unload (persisted
// with the cursor), and an acknowledgement of entries the new owner never
// read (delivered by the previous owner) is translated by reading them.
func TestReplicatedSubscriptionVector(t *testing.T) {
	cli, adm, rc := oneBroker(t, func(c *broker.Config) { c.RolloverEntries = 6 })
	srv := rc.Broker(0)
	ctx := context.Background()
	keepAll(t, adm, "public/repvec")
	topic := "public/repvec/t"
	p, _ := openProducer(t, cli, topic, "p")
	var ids []*clientv1.MessageId
	for i := range int64(20) {
		ids = append(ids, p.sendOK(i)) // local origin_seq i+1
	}
	req := &clientv1.Subscribe{Topic: topic, Subscription: "rs", Type: clientv1.SubscriptionType_SUBSCRIPTION_TYPE_EXCLUSIVE,
		InitialPosition: clientv1.InitialPosition_INITIAL_POSITION_EARLIEST, Replicated: true}
	c := subscribeWith(t, cli, req, 100)
	for range 20 {
		c.next()
	}
	vectorIs(t, srv, topic, "rs", nil)
	for _, i := range []int{3, 5} {
		if e := c.ack(ids[i], false); e != nil {
			t.Fatal(e)
		}
	}
	vectorIs(t, srv, topic, "rs", []int64{0, 4, 4, 6, 6})
	if e := c.ack(ids[9], true); e != nil {
		t.Fatal(e)
	}
	vectorIs(t, srv, topic, "rs", []int64{10})
	st, err := adm.GetTopicStats(ctx, &clientv1.GetTopicStatsRequest{Topic: topic})
	if err != nil || len(st.GetSubscriptions()) != 1 || !st.GetSubscriptions()[0].GetReplicated() {
		t.Fatalf("stats: %v %v, want one replicated subscription", st, err)
	}
	c.cancel()
	if _, err := adm.UnloadTopic(ctx, &clientv1.UnloadTopicRequest{Topic: topic}); err != nil {
		t.Fatal(err)
	}
	// Reloaded by the next subscribe, which grants no permits: nothing is
	// read for delivery, so acknowledging entry 15 cumulatively must read
	// the entries 11..15 to translate them.
	c2 := subscribeWith(t, cli, req, 0)
	vectorIs(t, srv, topic, "rs", []int64{10})
	if e := c2.ack(ids[14], true); e != nil {
		t.Fatal(e)
	}
	vectorIs(t, srv, topic, "rs", []int64{15})
	if e := c2.ack(ids[17], false); e != nil {
		t.Fatal(e)
	}
	vectorIs(t, srv, topic, "rs", []int64{15, 18, 18})
}

// TestReplicateSubscriptionsPolicy: with the namespace policy
// replicate_subscriptions every new subscription is replicated; the
// replicators' cursors never are.
func TestReplicateSubscriptionsPolicy(t *testing.T) {
	_, adm, _ := oneBroker(t, nil)
	ctx := context.Background()
	if _, err := adm.CreateNamespace(ctx, &clientv1.CreateNamespaceRequest{Namespace: "public/rsall",
		Policies: &clientv1.NamespacePolicies{ReplicateSubscriptions: true}}); err != nil {
		t.Fatal(err)
	}
	topic := "public/rsall/t"
	createTopicWithSub(t, ctx, adm, topic, "plain")
	if _, err := adm.CreateSubscription(ctx, &clientv1.CreateSubscriptionRequest{Topic: topic, Subscription: "meridian.repl.x"}); err == nil {
		t.Fatal("a subscription named like a replicator cursor was created")
	}
	st, err := adm.GetTopicStats(ctx, &clientv1.GetTopicStatsRequest{Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	if len(st.GetSubscriptions()) != 1 || !st.GetSubscriptions()[0].GetReplicated() {
		t.Fatalf("subscriptions %v: want plain, replicated by the namespace policy", st.GetSubscriptions())
	}
}

// TestSubscriptionUpdateEpochRules: the receiver's rules for updates from
// another region — an unknown subscription is created with the vector as
// its cover; an equal reset epoch joins; a higher (epoch, region) replaces;
// a lower one is ignored; a deletion is refused while consumers are
// connected, then deletes, and a late update does not bring it back; bad
// updates are refused naming the field.
func TestSubscriptionUpdateEpochRules(t *testing.T) {
	cli, adm, rc := oneBroker(t, nil)
	srv := rc.Broker(0)
	keepAll(t, adm, "public/epochs")
	topic := "public/epochs/t"
	p, _ := openProducer(t, cli, topic, "p")
	for i := range int64(10) {
		p.sendOK(i) // local origin_seq 1..10
	}
	region := broker.OwnStreamForTesting(srv, topic) // the own origin stream
	vec := func(md int64, ranges ...int64) *clientv1.AckVector {
		o := &clientv1.OriginAcks{MarkDeleteSeq: md}
		for i := 0; i+1 < len(ranges); i += 2 {
			o.Acked = append(o.Acked, &clientv1.SeqRange{First: ranges[i], Last: ranges[i+1]})
		}
		return &clientv1.AckVector{Origins: map[string]*clientv1.OriginAcks{region: o}}
	}
	apply := func(u *clientv1.SubscriptionUpdate) error {
		u.Subscription = "r"
		u.Type = clientv1.SubscriptionType_SUBSCRIPTION_TYPE_SHARED
		return broker.ApplySubUpdateForTesting(srv, topic, "x", u)
	}
	backlog := func(want int64) {
		t.Helper()
		waitFor(t, fmt.Sprintf("backlog %d", want), func() bool { return subBacklog(t, adm, topic, "r") == want })
	}
	steps := []struct {
		what    string
		u       *clientv1.SubscriptionUpdate
		vector  []int64
		backlog int64
	}{
		{"unknown subscription: created with the vector as cover", &clientv1.SubscriptionUpdate{Vector: vec(3)}, []int64{3}, 7},
		{"equal epoch: joined", &clientv1.SubscriptionUpdate{Vector: vec(0, 5, 6)}, []int64{3, 5, 6}, 5},
		{"higher region at the same epoch: replaces", &clientv1.SubscriptionUpdate{ResetRegion: "zz", Vector: vec(1)}, []int64{1}, 9},
		{"lower (epoch, region): ignored", &clientv1.SubscriptionUpdate{Vector: vec(10)}, []int64{1}, 9},
		{"higher epoch: replaces", &clientv1.SubscriptionUpdate{ResetEpoch: 1, ResetRegion: "a", Vector: vec(8)}, []int64{8}, 2},
		{"same epoch again: joined", &clientv1.SubscriptionUpdate{ResetEpoch: 1, ResetRegion: "a", Vector: vec(0, 10, 10)}, []int64{8, 10, 10}, 1},
	}
	for _, s := range steps {
		if err := apply(s.u); err != nil {
			t.Fatalf("%s: %v", s.what, err)
		}
		vectorIs(t, srv, topic, "r", s.vector)
		backlog(s.backlog)
	}
	// Bad updates change nothing and name the field.
	for _, bad := range []*clientv1.SubscriptionUpdate{
		{Subscription: "meridian.repl.b", Vector: vec(1)},
		{Subscription: "r", Vector: vec(-1)},
		{Subscription: "r", Vector: vec(0, 5, 4)},
		{Subscription: "r", ResetEpoch: -1},
	} {
		err := broker.ApplySubUpdateForTesting(srv, topic, "x", bad)
		if !errors.Is(err, broker.ErrInvalidArgument) {
			t.Fatalf("bad update %v: %v, want invalid argument", bad, err)
		}
	}
	vectorIs(t, srv, topic, "r", []int64{8, 10, 10})
	// Deletion: refused while a consumer is connected.
	c := subscribeWith(t, cli, &clientv1.Subscribe{Topic: topic, Subscription: "r", Type: clientv1.SubscriptionType_SUBSCRIPTION_TYPE_SHARED}, 10)
	if err := apply(&clientv1.SubscriptionUpdate{ResetEpoch: 1, ResetRegion: "a", Deleted: true}); !errors.Is(err, broker.ErrNotAllowed) {
		t.Fatalf("deletion with a consumer connected: %v, want not allowed", err)
	}
	if _, m := c.next(); m != "m8" {
		t.Fatalf("the consumer got %s, want m8 (seq 9, the only one not covered)", m)
	}
	c.cancel()
	waitFor(t, "deletion applied once the consumer left", func() bool {
		return apply(&clientv1.SubscriptionUpdate{ResetEpoch: 1, ResetRegion: "a", Deleted: true}) == nil
	})
	if err := apply(&clientv1.SubscriptionUpdate{ResetEpoch: 1, ResetRegion: "a", Vector: vec(9)}); err != nil {
		t.Fatal(err)
	}
	st, err := adm.GetTopicStats(context.Background(), &clientv1.GetTopicStatsRequest{Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	if len(st.GetSubscriptions()) != 0 {
		t.Fatalf("a late update recreated the deleted subscription: %v", st.GetSubscriptions())
	}
}

// TestCoverAppliesToLaterEntries: a vector received before the entries it
// covers (acknowledgements replicated faster than the entries) applies to
// them when they are stored, with no consumer: the backlog follows.
func TestCoverAppliesToLaterEntries(t *testing.T) {
	cli, adm, rc := oneBroker(t, nil)
	srv := rc.Broker(0)
	keepAll(t, adm, "public/later")
	topic := "public/later/t"
	p, _ := openProducer(t, cli, topic, "p")
	p.sendOK(0)                                      // seq 1
	region := broker.OwnStreamForTesting(srv, topic) // the own origin stream
	if err := broker.ApplySubUpdateForTesting(srv, topic, "x", &clientv1.SubscriptionUpdate{Subscription: "r",
		Vector: &clientv1.AckVector{Origins: map[string]*clientv1.OriginAcks{region: {MarkDeleteSeq: 10}}}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "backlog 0", func() bool { return subBacklog(t, adm, topic, "r") == 0 })
	for i := range int64(11) {
		p.sendOK(i + 1) // seqs 2..12
	}
	waitFor(t, "backlog 2 (seqs 11 and 12) without a consumer", func() bool { return subBacklog(t, adm, topic, "r") == 2 })
	c := subscribeWith(t, cli, &clientv1.Subscribe{Topic: topic, Subscription: "r"}, 10)
	if _, m := c.next(); m != "m10" {
		t.Fatalf("first delivery %s, want m10 (seq 11)", m)
	}
}
