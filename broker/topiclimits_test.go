package broker_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
	"github.com/meridianmq/meridian/broker"
	"google.golang.org/protobuf/proto"
)

// subscribeOnce opens one consumer and returns the broker's answer: nil
// when subscribed, else the stream's error.
func subscribeOnce(t *testing.T, cli clientv1.MeridianClient, topic, sub string, typ clientv1.SubscriptionType) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	st, err := cli.Consume(ctx)
	if err != nil {
		return err
	}
	if err := st.Send(&clientv1.ConsumeRequest{Kind: &clientv1.ConsumeRequest_Subscribe{Subscribe: &clientv1.Subscribe{Topic: topic, Subscription: sub, Type: typ,
		InitialPosition: clientv1.InitialPosition_INITIAL_POSITION_EARLIEST}}}); err != nil {
		return err
	}
	r, err := st.Recv()
	if err != nil {
		return err
	}
	if r.GetSubscribed() == nil {
		t.Fatalf("subscribe %s: unexpected answer %v", sub, r)
	}
	return nil
}

// openProducerErr opens a producer and returns the broker's refusal.
func openProducerErr(t *testing.T, cli clientv1.MeridianClient, topic, name string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	st, err := cli.Produce(ctx)
	if err != nil {
		return err
	}
	if err := st.Send(&clientv1.ProduceRequest{Kind: &clientv1.ProduceRequest_Open{Open: &clientv1.OpenProducer{Topic: topic, ProducerName: name}}}); err != nil {
		return err
	}
	_, err = st.Recv()
	return err
}

func wantLimit(t *testing.T, what string, err error, field string, value int) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: accepted past %s %d", what, field, value)
	}
	if want := field + " is " + strconv.Itoa(value); !strings.Contains(err.Error(), want) {
		t.Fatalf("%s: %v, want an error naming %q", what, err, want)
	}
}

// TestTopicLimits: producers per topic, consumers per subscription and
// subscriptions per topic from the broker's config, and a namespace
// policy of the same name overriding it. A refusal names the limit and its
// value and adds nothing; once one leaves, another fits.
func TestTopicLimits(t *testing.T) {
	cli, adm, _ := oneBroker(t, func(c *broker.Config) {
		c.MaxProducersPerTopic, c.MaxConsumersPerSubscription, c.MaxSubscriptionsPerTopic = 2, 2, 2
	})
	ctx := context.Background()
	topic := "public/default/limits"
	shared := clientv1.SubscriptionType_SUBSCRIPTION_TYPE_SHARED

	p1, _ := openProducer(t, cli, topic, "p1")
	openProducer(t, cli, topic, "p2")
	wantLimit(t, "third producer", openProducerErr(t, cli, topic, "p3"), "max_producers_per_topic", 2)
	p1.st.CloseSend()
	waitFor(t, "a producer slot after p1 left", func() bool { return openProducerErr(t, cli, topic, "p3") == nil })

	for _, name := range []string{"c1", "c2"} {
		if err := subscribeOnce(t, cli, topic, "s1", shared); err != nil {
			t.Fatalf("consumer %s: %v", name, err)
		}
	}
	wantLimit(t, "third consumer", subscribeOnce(t, cli, topic, "s1", shared), "max_consumers_per_subscription", 2)

	if err := subscribeOnce(t, cli, topic, "s2", shared); err != nil {
		t.Fatal(err)
	}
	wantLimit(t, "third subscription", subscribeOnce(t, cli, topic, "s3", shared), "max_subscriptions_per_topic", 2)
	_, err := adm.CreateSubscription(ctx, &clientv1.CreateSubscriptionRequest{Topic: topic, Subscription: "s3"})
	wantLimit(t, "third subscription (admin)", err, "max_subscriptions_per_topic", 2)
	subs, err := adm.ListSubscriptions(ctx, &clientv1.ListSubscriptionsRequest{Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range subs.GetSubscriptions() {
		if strings.Contains(s, "s3") {
			t.Fatalf("refused subscription s3 exists: %v", subs.GetSubscriptions())
		}
	}

	// A namespace policy overrides the config: one producer here.
	if _, err := adm.CreateNamespace(ctx, &clientv1.CreateNamespaceRequest{Namespace: "public/lim1",
		Policies: &clientv1.NamespacePolicies{MaxProducersPerTopic: proto.Int32(1)}}); err != nil {
		t.Fatal(err)
	}
	openProducer(t, cli, "public/lim1/t", "only")
	wantLimit(t, "second producer under the policy", openProducerErr(t, cli, "public/lim1/t", "second"), "max_producers_per_topic", 1)
	// 0 = no limit.
	if _, err := adm.CreateNamespace(ctx, &clientv1.CreateNamespaceRequest{Namespace: "public/lim0",
		Policies: &clientv1.NamespacePolicies{MaxProducersPerTopic: proto.Int32(0)}}); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"a", "b", "c"} {
		openProducer(t, cli, "public/lim0/t", n)
	}
	// A negative policy is refused, naming the field.
	_, err = adm.CreateNamespace(ctx, &clientv1.CreateNamespaceRequest{Namespace: "public/limneg",
		Policies: &clientv1.NamespacePolicies{MaxSubscriptionsPerTopic: proto.Int32(-1)}})
	if err == nil || !strings.Contains(err.Error(), "max_subscriptions_per_topic -1") {
		t.Fatalf("negative policy: %v", err)
	}
}

// TestAutoCreationSwitches: with allow_auto_topic_creation off a
// producer, consumer or lookup of a topic that does not exist is refused
// naming the switch, and nothing is created; the admin API still creates,
// and a namespace policy overrides the broker's config both ways. With
// allow_auto_subscription_creation off a consumer uses only existing
// subscriptions.
func TestAutoCreationSwitches(t *testing.T) {
	cli, adm, _ := oneBroker(t, func(c *broker.Config) { c.AllowAutoTopicCreation = false })
	ctx := context.Background()
	exclusive := clientv1.SubscriptionType_SUBSCRIPTION_TYPE_EXCLUSIVE
	topic := "public/default/noauto"
	wantOff := func(what string, err error, field string) {
		t.Helper()
		if err == nil || !strings.Contains(err.Error(), field+" is false") {
			t.Fatalf("%s: %v, want a refusal naming %s", what, err, field)
		}
	}
	wantOff("producer", openProducerErr(t, cli, topic, "p"), "allow_auto_topic_creation")
	wantOff("consumer", subscribeOnce(t, cli, topic, "s", exclusive), "allow_auto_topic_creation")
	_, err := cli.Lookup(ctx, &clientv1.LookupRequest{Topic: topic})
	wantOff("lookup", err, "allow_auto_topic_creation")
	if _, err := adm.GetTopicStats(ctx, &clientv1.GetTopicStatsRequest{Topic: topic}); err == nil {
		t.Fatal("a refused topic exists")
	}
	if _, err := adm.CreateTopic(ctx, &clientv1.CreateTopicRequest{Topic: topic}); err != nil {
		t.Fatalf("admin create with auto-creation off: %v", err)
	}
	p, _ := openProducer(t, cli, topic, "p")
	p.sendOK(0)

	// The namespace policy turns it back on here.
	if _, err := adm.CreateNamespace(ctx, &clientv1.CreateNamespaceRequest{Namespace: "public/auto",
		Policies: &clientv1.NamespacePolicies{AllowAutoTopicCreation: proto.Bool(true), AllowAutoSubscriptionCreation: proto.Bool(false)}}); err != nil {
		t.Fatal(err)
	}
	p2, _ := openProducer(t, cli, "public/auto/t", "p")
	p2.sendOK(0)
	wantOff("new subscription", subscribeOnce(t, cli, "public/auto/t", "s", exclusive), "allow_auto_subscription_creation")
	if _, err := adm.CreateSubscription(ctx, &clientv1.CreateSubscriptionRequest{Topic: "public/auto/t", Subscription: "s",
		InitialPosition: clientv1.InitialPosition_INITIAL_POSITION_EARLIEST}); err != nil {
		t.Fatalf("admin create subscription with auto-creation off: %v", err)
	}
	if err := subscribeOnce(t, cli, "public/auto/t", "s", exclusive); err != nil {
		t.Fatalf("existing subscription: %v", err)
	}
}

// TestDefaultBacklogQuota: a namespace created without a backlog quota
// gets the broker's default_backlog_quota_bytes; one created with its own
// keeps it, and -1 in the config leaves new namespaces without one.
func TestDefaultBacklogQuota(t *testing.T) {
	_, adm, _ := oneBroker(t, func(c *broker.Config) { c.DefaultBacklogQuotaBytes = 1 << 30 })
	ctx := context.Background()
	if _, err := adm.CreateNamespace(ctx, &clientv1.CreateNamespaceRequest{Namespace: "public/dq"}); err != nil {
		t.Fatal(err)
	}
	if _, err := adm.CreateNamespace(ctx, &clientv1.CreateNamespaceRequest{Namespace: "public/own",
		Policies: &clientv1.NamespacePolicies{BacklogQuotaBytes: proto.Int64(-1)}}); err != nil {
		t.Fatal(err)
	}
	for ns, want := range map[string]int64{"public/dq": 1 << 30, "public/own": -1} {
		p, err := adm.GetNamespacePolicies(ctx, &clientv1.GetNamespacePoliciesRequest{Namespace: ns})
		if err != nil {
			t.Fatal(err)
		}
		if p.GetPolicies().BacklogQuotaBytes == nil || p.GetPolicies().GetBacklogQuotaBytes() != want {
			t.Fatalf("%s: backlog_quota_bytes %v, want %d", ns, p.GetPolicies().BacklogQuotaBytes, want)
		}
	}
}

// TestMaxTopicsPerNamespace: past max_topics_per_namespace neither a
// producer nor the admin API creates a topic (the refusal names the limit
// and its value, and nothing is created); existing topics are still used,
// and a namespace policy of 0 lifts the limit there.
func TestMaxTopicsPerNamespace(t *testing.T) {
	cli, adm, _ := oneBroker(t, func(c *broker.Config) { c.MaxTopicsPerNamespace = 2 })
	ctx := context.Background()
	if _, err := adm.CreateTopic(ctx, &clientv1.CreateTopicRequest{Topic: "public/default/t1"}); err != nil {
		t.Fatal(err)
	}
	p, _ := openProducer(t, cli, "public/default/t2", "p")
	p.sendOK(0)
	wantLimit(t, "third topic by a producer", openProducerErr(t, cli, "public/default/t3", "p"), "max_topics_per_namespace", 2)
	_, err := adm.CreateTopic(ctx, &clientv1.CreateTopicRequest{Topic: "public/default/t3"})
	wantLimit(t, "third topic by the admin API", err, "max_topics_per_namespace", 2)
	if _, err := adm.GetTopicStats(ctx, &clientv1.GetTopicStatsRequest{Topic: "public/default/t3"}); err == nil {
		t.Fatal("a refused topic exists")
	}
	p1, _ := openProducer(t, cli, "public/default/t1", "p")
	p1.sendOK(0)
	if _, err := adm.CreateNamespace(ctx, &clientv1.CreateNamespaceRequest{Namespace: "public/many",
		Policies: &clientv1.NamespacePolicies{MaxTopicsPerNamespace: proto.Int32(0)}}); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"a", "b", "c"} {
		if _, err := adm.CreateTopic(ctx, &clientv1.CreateTopicRequest{Topic: "public/many/" + n}); err != nil {
			t.Fatalf("topic %s under a policy of 0: %v", n, err)
		}
	}
}
