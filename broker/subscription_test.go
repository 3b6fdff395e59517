package broker_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
	"github.com/meridianmq/meridian/broker"
)

func TestResetUnsubscribeAndRetentionForever(t *testing.T) {
	cli, adm, rc := oneBroker(t, func(c *broker.Config) { c.RolloverEntries = 5 })
	ctx := context.Background()
	if _, err := adm.CreateNamespace(ctx, &clientv1.CreateNamespaceRequest{Namespace: "public/keep",
		Policies: &clientv1.NamespacePolicies{RetentionTimeSeconds: -1, RetentionSizeBytes: -1}}); err != nil {
		t.Fatal(err)
	}
	topic := "public/keep/t"
	p, _ := openProducer(t, cli, topic, "p")
	var ids []*clientv1.MessageId
	for i := range int64(20) {
		ids = append(ids, p.sendOK(i))
		if i == 9 {
			time.Sleep(20 * time.Millisecond)
		}
	}
	c := subscribe(t, cli, topic, "s", clientv1.SubscriptionType_SUBSCRIPTION_TYPE_FAILOVER)
	var last *clientv1.MessageId
	for range 20 {
		last, _ = c.next()
	}
	if e := c.ack(last, true); e != nil {
		t.Fatal(e)
	}
	// Everything is acknowledged, but retention is "forever".
	time.Sleep(500 * time.Millisecond)
	st, _ := adm.GetTopicInternalStats(ctx, &clientv1.GetTopicInternalStatsRequest{Topic: topic})
	if len(st.Ledgers) < 4 || st.Entries != 20 {
		t.Fatalf("retention forever deleted data: %d ledgers, %d entries", len(st.Ledgers), st.Entries)
	}
	// Reset to a message ID: delivery restarts there.
	if _, err := adm.ResetSubscription(ctx, &clientv1.ResetSubscriptionRequest{Topic: topic, Subscription: "s",
		Position: &clientv1.ResetSubscriptionRequest_MessageId{MessageId: ids[12]}}); err != nil {
		t.Fatal(err)
	}
	if _, payload := c.next(); payload != "m12" {
		t.Fatalf("after reset to m12 got %s", payload)
	}
	// Reset to earliest.
	if _, err := adm.ResetSubscription(ctx, &clientv1.ResetSubscriptionRequest{Topic: topic, Subscription: "s",
		Position: &clientv1.ResetSubscriptionRequest_InitialPosition{InitialPosition: clientv1.InitialPosition_INITIAL_POSITION_EARLIEST}}); err != nil {
		t.Fatal(err)
	}
	for {
		if _, payload := c.next(); payload == "m0" {
			break
		}
	}
	_, err := adm.ResetSubscription(ctx, &clientv1.ResetSubscriptionRequest{Topic: topic, Subscription: "s"})
	if code(err) != clientv1.ErrorCode_ERROR_CODE_INVALID_ARGUMENT {
		t.Fatalf("reset without position: %v", err)
	}
	// Unsubscribe deletes the subscription.
	if err := c.st.Send(&clientv1.ConsumeRequest{Kind: &clientv1.ConsumeRequest_Unsubscribe{Unsubscribe: &clientv1.Unsubscribe{}}}); err != nil {
		t.Fatal(err)
	}
	for {
		r, err := c.st.Recv()
		if err != nil {
			t.Fatalf("unsubscribe: %v", err)
		}
		if r.GetUnsubscribed() != nil {
			break
		}
	}
	subs, _ := adm.ListSubscriptions(ctx, &clientv1.ListSubscriptionsRequest{Topic: topic})
	if len(subs.Subscriptions) != 0 {
		t.Fatalf("after unsubscribe: %v", subs.Subscriptions)
	}
	// Namespace with a topic cannot be deleted; after deleting the topic it can.
	if _, err := adm.DeleteNamespace(ctx, &clientv1.DeleteNamespaceRequest{Namespace: "public/keep"}); code(err) != clientv1.ErrorCode_ERROR_CODE_NOT_ALLOWED {
		t.Fatalf("delete non-empty namespace: %v", err)
	}
	if _, err := adm.DeleteTopic(ctx, &clientv1.DeleteTopicRequest{Topic: topic, Force: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := adm.DeleteNamespace(ctx, &clientv1.DeleteNamespaceRequest{Namespace: "public/keep"}); err != nil {
		t.Fatal(err)
	}
	// Metrics are labelled per namespace.
	resp, err := http.Get("http://" + rc.Broker(0).HTTPAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), `meridian_broker_messages_in_total{namespace="public/keep"} 20`) {
		t.Fatalf("metrics lack the namespace counter:\n%s", grepLines(string(body), "meridian_broker"))
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return fmt.Sprint(strings.Join(out, "\n"))
}

func TestSharedRoundRobinAndRedeliveryOnClose(t *testing.T) {
	cli, _, _ := oneBroker(t, nil)
	topic := "public/default/shared"
	c1 := subscribe(t, cli, topic, "sh", clientv1.SubscriptionType_SUBSCRIPTION_TYPE_SHARED)
	c2 := subscribe(t, cli, topic, "sh", clientv1.SubscriptionType_SUBSCRIPTION_TYPE_SHARED)
	p, _ := openProducer(t, cli, topic, "p")
	for i := range int64(10) {
		p.sendOK(i)
	}
	got := map[string]bool{}
	for range 5 {
		_, a := c1.next()
		_, b := c2.next()
		got[a], got[b] = true, true
	}
	if len(got) != 10 {
		t.Fatalf("round robin delivered %d distinct messages: %v", len(got), got)
	}
	// c1 closes without acking: its five go to c2.
	c1.cancel()
	again := map[string]bool{}
	for range 5 {
		_, m := c2.next()
		again[m] = true
	}
	t.Logf("redelivered to c2 after c1 closed: %v", again)
	if len(again) != 5 {
		t.Fatalf("redelivery: %v", again)
	}
}
