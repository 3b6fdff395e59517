package region

import (
	"context"
	"testing"
	"time"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
)

func subscribe(t *testing.T, cli clientv1.MeridianClient, topic, sub string, typ clientv1.SubscriptionType, name string) (clientv1.Meridian_ConsumeClient, context.CancelFunc) {
	return subscribeUntil(t, cli, topic, sub, typ, name, time.Now().Add(20*time.Second))
}

// subscribeUntil retries while the broker still sees a closed consumer.
func subscribeUntil(t *testing.T, cli clientv1.MeridianClient, topic, sub string, typ clientv1.SubscriptionType, name string, deadline time.Time) (clientv1.Meridian_ConsumeClient, context.CancelFunc) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	st, err := cli.Consume(ctx)
	if err != nil {
		t.Fatal(err)
	}
	st.Send(&clientv1.ConsumeRequest{Kind: &clientv1.ConsumeRequest_Subscribe{Subscribe: &clientv1.Subscribe{Topic: topic, Subscription: sub, Type: typ,
		ConsumerName: name, InitialPosition: clientv1.InitialPosition_INITIAL_POSITION_EARLIEST}}})
	r, err := st.Recv()
	if err != nil {
		cancel()
		if time.Now().After(deadline) {
			t.Fatalf("subscribe %s/%s: %v", sub, name, err)
		}
		time.Sleep(50 * time.Millisecond)
		return subscribeUntil(t, cli, topic, sub, typ, name, deadline)
	}
	if r.GetSubscribed() == nil {
		t.Fatalf("want subscribed, got %v", r)
	}
	st.Send(&clientv1.ConsumeRequest{Kind: &clientv1.ConsumeRequest_Flow{Flow: &clientv1.Flow{Permits: 1000}}})
	return st, cancel
}

func nextMsg(t *testing.T, st clientv1.Meridian_ConsumeClient) *clientv1.ConsumeResponse {
	t.Helper()
	for {
		r, err := st.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if r.GetActiveChange() == nil {
			return r
		}
	}
}

func TestSubscriptionTypesAcksAndRedelivery(t *testing.T) {
	sa := startSA(t, t.TempDir())
	defer sa.Close()
	cli := dial(t, sa.GRPCAddr())
	topic := "public/default/subs"
	produce(t, cli, topic, 0, 10)

	// Exclusive: a second consumer is refused.
	ex, cancelEx := subscribe(t, cli, topic, "ex", clientv1.SubscriptionType_SUBSCRIPTION_TYPE_EXCLUSIVE, "a")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	st2, _ := cli.Consume(ctx)
	st2.Send(&clientv1.ConsumeRequest{Kind: &clientv1.ConsumeRequest_Subscribe{Subscribe: &clientv1.Subscribe{Topic: topic, Subscription: "ex", ConsumerName: "b"}}})
	if _, err := st2.Recv(); err == nil {
		t.Fatal("second exclusive consumer accepted")
	} else {
		t.Logf("second exclusive consumer: %v", err)
	}
	cancel()
	// Receive 10, ack only the first 4; close; the rest are redelivered.
	var ids []*clientv1.MessageId
	for range 10 {
		ids = append(ids, nextMsg(t, ex).GetMessage().GetMessageId())
	}
	ex.Send(&clientv1.ConsumeRequest{Kind: &clientv1.ConsumeRequest_Ack{Ack: &clientv1.Ack{MessageIds: ids[3:4], Cumulative: true, RequestId: 7}}})
	if r := nextMsg(t, ex); r.GetAckResponse().GetRequestId() != 7 || r.GetAckResponse().GetError() != nil {
		t.Fatalf("ack response %v", r)
	}
	cancelEx()
	ex2, cancelEx2 := subscribe(t, cli, topic, "ex", clientv1.SubscriptionType_SUBSCRIPTION_TYPE_EXCLUSIVE, "c")
	first := nextMsg(t, ex2).GetMessage().GetMessageId()
	if first.GetEntryId() != ids[4].GetEntryId() || first.GetLedgerId() != ids[4].GetLedgerId() {
		t.Fatalf("redelivery starts at %v, want %v", first, ids[4])
	}
	cancelEx2()

	// Shared: round-robin between two consumers; cumulative ack refused.
	s1, c1 := subscribe(t, cli, topic, "sh", clientv1.SubscriptionType_SUBSCRIPTION_TYPE_SHARED, "s1")
	defer c1()
	// s1 takes its first entry before s2 subscribes: with both connected,
	// s2's permits may reach the broker first and s2 take all ten (this
	// test once waited 60 s for an entry s1 never got).
	m := nextMsg(t, s1).GetMessage()
	_, c2 := subscribe(t, cli, topic, "sh", clientv1.SubscriptionType_SUBSCRIPTION_TYPE_SHARED, "s2")
	defer c2()
	s1.Send(&clientv1.ConsumeRequest{Kind: &clientv1.ConsumeRequest_Ack{Ack: &clientv1.Ack{MessageIds: []*clientv1.MessageId{m.MessageId}, Cumulative: true, RequestId: 9}}})
	for {
		r := nextMsg(t, s1)
		if ar := r.GetAckResponse(); ar != nil {
			if ar.GetError().GetCode() != clientv1.ErrorCode_ERROR_CODE_NOT_ALLOWED {
				t.Fatalf("cumulative ack on shared: %v", ar)
			}
			t.Logf("cumulative ack on shared: %v", ar.GetError().GetMessage())
			break
		}
	}

	// Failover: the lower priority value is active; it switches on close.
	f1, cf1 := subscribe(t, cli, topic, "fo", clientv1.SubscriptionType_SUBSCRIPTION_TYPE_FAILOVER, "f1")
	f2, cf2 := subscribe(t, cli, topic, "fo", clientv1.SubscriptionType_SUBSCRIPTION_TYPE_FAILOVER, "f2")
	defer cf2()
	if nextMsg(t, f1).GetMessage() == nil {
		t.Fatal("f1 should be active")
	}
	cf1()
	if nextMsg(t, f2).GetMessage() == nil {
		t.Fatal("f2 should take over")
	}
}
