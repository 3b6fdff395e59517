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
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// fastBacklogPass runs the TTL / eviction pass every 100 ms.
func fastBacklogPass(c *broker.Config) { c.BacklogPolicyInterval = 100 * time.Millisecond }

// policyNamespace creates namespace ns with policies p.
func policyNamespace(t *testing.T, adm clientv1.AdminClient, ns string, p *clientv1.NamespacePolicies) {
	t.Helper()
	if _, err := adm.CreateNamespace(context.Background(), &clientv1.CreateNamespaceRequest{Namespace: ns, Policies: p}); err != nil {
		t.Fatal(err)
	}
}

// topicStats returns topic's stats.
func topicStats(t *testing.T, adm clientv1.AdminClient, topic string) *clientv1.TopicStats {
	t.Helper()
	st, err := adm.GetTopicStats(context.Background(), &clientv1.GetTopicStatsRequest{Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestMessageTTLExpiresOnlyOldMessages: with message_ttl_seconds set, the
// entries published longer ago than the TTL are acknowledged on every
// subscription; younger ones are delivered.
func TestMessageTTLExpiresOnlyOldMessages(t *testing.T) {
	cli, adm, rc := oneBroker(t, fastBacklogPass)
	ctx := context.Background()
	const ttl = 3
	policyNamespace(t, adm, "public/ttl", &clientv1.NamespacePolicies{MessageTtlSeconds: proto.Int64(ttl)})
	topic := "public/ttl/t"
	createTopicWithSub(t, ctx, adm, topic, "s")
	if _, err := adm.CreateSubscription(ctx, &clientv1.CreateSubscriptionRequest{Topic: topic, Subscription: "s2",
		InitialPosition: clientv1.InitialPosition_INITIAL_POSITION_EARLIEST}); err != nil {
		t.Fatal(err)
	}
	p, _ := openProducer(t, cli, topic, "p")
	for i := range int64(5) {
		p.sendOK(i)
	}
	waitFor(t, "the TTL expiring the first five entries on both subscriptions", func() bool {
		st := topicStats(t, adm, topic)
		return len(st.GetSubscriptions()) == 2 && st.GetBacklogEntries() == 0
	})
	young := time.Now()
	for i := range int64(5) {
		p.sendOK(5 + i)
	}
	c := subscribe(t, cli, topic, "s", clientv1.SubscriptionType_SUBSCRIPTION_TYPE_EXCLUSIVE)
	if _, got := c.next(); got != "m5" {
		t.Fatalf("first message after the TTL: %q, want m5 (m0..m4 expired)", got)
	}
	if time.Since(young) < ttl*time.Second {
		// Still younger than the TTL: nothing of them expired.
		if s := subStat(t, adm, topic, "s2"); s.GetExpiredEntriesTotal() != 5 {
			t.Fatalf("s2: %v, want exactly the 5 old entries expired", s)
		}
	} else {
		t.Logf("the machine is slow: %v passed, the young entries may have expired too", time.Since(young))
	}
	if body := scrape(t, rc.Broker(0).HTTPAddr()); !strings.Contains(body, `meridian_broker_expired_entries_total{namespace="public/ttl"}`) {
		t.Fatal("metrics lack meridian_broker_expired_entries_total of public/ttl")
	}
	// Bad values are refused, naming the field.
	_, err := adm.SetNamespacePolicies(ctx, &clientv1.SetNamespacePoliciesRequest{Namespace: "public/ttl",
		Policies: &clientv1.NamespacePolicies{MessageTtlSeconds: proto.Int64(-5)}})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "message_ttl_seconds") {
		t.Fatalf("message_ttl_seconds -5: %v", err)
	}
}

// TestRetentionKeepsAcknowledgedForReaders: with a retention time, data
// every subscription acknowledged (here by clear-backlog) stays stored, and
// a reader from the earliest position reads all of it.
func TestRetentionKeepsAcknowledgedForReaders(t *testing.T) {
	cli, adm, _ := oneBroker(t, func(c *broker.Config) { c.RolloverEntries = 3 })
	ctx := context.Background()
	policyNamespace(t, adm, "public/keep", &clientv1.NamespacePolicies{RetentionTimeSeconds: 3600})
	topic := "public/keep/t"
	createTopicWithSub(t, ctx, adm, topic, "s")
	p, _ := openProducer(t, cli, topic, "p")
	for i := range int64(10) {
		p.sendOK(i)
	}
	if _, err := adm.ClearBacklog(ctx, &clientv1.ClearBacklogRequest{Topic: topic, Subscription: "s"}); err != nil {
		t.Fatal(err)
	}
	before, err := adm.GetTopicInternalStats(ctx, &clientv1.GetTopicInternalStatsRequest{Topic: topic})
	if err != nil || len(before.GetLedgers()) < 3 {
		t.Fatalf("internal stats: %v %v, want several ledgers", before, err)
	}
	time.Sleep(time.Second) // ten retention rounds (RetentionInterval 100 ms): not an assertion on time
	after, err := adm.GetTopicInternalStats(ctx, &clientv1.GetTopicInternalStatsRequest{Topic: topic})
	if err != nil || len(after.GetLedgers()) != len(before.GetLedgers()) {
		t.Fatalf("retention deleted acknowledged ledgers inside the retention time: %d -> %d (%v)", len(before.GetLedgers()), len(after.GetLedgers()), err)
	}
	r := subscribeWith(t, cli, &clientv1.Subscribe{Topic: topic, Subscription: "reader", NonDurable: true,
		Type: clientv1.SubscriptionType_SUBSCRIPTION_TYPE_EXCLUSIVE, InitialPosition: clientv1.InitialPosition_INITIAL_POSITION_EARLIEST}, 100)
	for i := range 10 {
		if _, got := r.next(); got != "m"+string(rune('0'+i)) {
			t.Fatalf("reader message %d: %q", i, got)
		}
	}
}

// TestBacklogQuotaAgeProducerError: past backlog_quota_age_seconds a send
// fails at once naming the age quota; after clear-backlog a new stream
// sends again.
func TestBacklogQuotaAgeProducerError(t *testing.T) {
	cli, adm, _ := oneBroker(t, nil)
	ctx := context.Background()
	policyNamespace(t, adm, "public/ageerr", &clientv1.NamespacePolicies{BacklogQuotaAgeSeconds: proto.Int64(1),
		BacklogQuotaAction: clientv1.QuotaAction_QUOTA_ACTION_PRODUCER_ERROR})
	topic := "public/ageerr/t"
	createTopicWithSub(t, ctx, adm, topic, "slow")
	p, _ := openProducer(t, cli, topic, "p")
	p.sendOK(0)
	var refused *clientv1.Error
	seq := int64(1)
	waitFor(t, "a send refused by the age quota", func() bool {
		time.Sleep(200 * time.Millisecond)
		r := p.send(seq, []byte("m"))
		seq++
		// Accepted while the oldest entry was younger than 1 s: a later
		// send must be refused once it is older.
		refused = r.GetError()
		return refused != nil
	})
	if refused.GetCode() != clientv1.ErrorCode_ERROR_CODE_QUOTA_EXCEEDED || !strings.Contains(refused.GetMessage(), "backlog_quota_age_seconds 1") ||
		!strings.Contains(refused.GetMessage(), "slow") {
		t.Fatalf("refusal: %v, want QUOTA_EXCEEDED naming backlog_quota_age_seconds 1 and the cursor", refused)
	}
	if st := topicStats(t, adm, topic); st.GetOldestBacklogAgeSeconds() < 1 {
		t.Fatalf("stats: oldest_backlog_age_seconds %d, want >= 1", st.GetOldestBacklogAgeSeconds())
	}
	if _, err := adm.ClearBacklog(ctx, &clientv1.ClearBacklogRequest{Topic: topic, Subscription: "slow"}); err != nil {
		t.Fatal(err)
	}
	_ = p.st.CloseSend()
	waitFor(t, "a send accepted after clear-backlog", func() bool {
		p2, _ := openProducer(t, cli, topic, "p2")
		return p2.send(100, []byte("after")).GetError() == nil
	})
	// Bad values are refused, naming the field; eviction is no lag action.
	for _, c := range []struct {
		p    *clientv1.NamespacePolicies
		want string
	}{
		{&clientv1.NamespacePolicies{BacklogQuotaAgeSeconds: proto.Int64(-2)}, "backlog_quota_age_seconds"},
		{&clientv1.NamespacePolicies{MaxReplicationLagAction: clientv1.QuotaAction_QUOTA_ACTION_CONSUMER_BACKLOG_EVICTION}, "max_replication_lag_action"},
		{&clientv1.NamespacePolicies{BacklogQuotaAction: 7}, "backlog_quota_action"},
	} {
		_, err := adm.SetNamespacePolicies(ctx, &clientv1.SetNamespacePoliciesRequest{Namespace: "public/ageerr", Policies: c.p})
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), c.want) {
			t.Errorf("policies %v: %v, want InvalidArgument naming %s", c.p, err, c.want)
		}
	}
	pol, err := adm.GetNamespacePolicies(ctx, &clientv1.GetNamespacePoliciesRequest{Namespace: "public/ageerr"})
	if err != nil || pol.GetPolicies().GetBacklogQuotaAgeSeconds() != 1 {
		t.Fatalf("a refused change changed the policies: %v %v", pol, err)
	}
}

// TestBacklogQuotaAgeProducerHold: past the age quota a send is held and
// completes once the backlog is acknowledged.
func TestBacklogQuotaAgeProducerHold(t *testing.T) {
	cli, adm, _ := oneBroker(t, nil)
	ctx := context.Background()
	policyNamespace(t, adm, "public/agehold", &clientv1.NamespacePolicies{BacklogQuotaAgeSeconds: proto.Int64(1),
		BacklogQuotaAction: clientv1.QuotaAction_QUOTA_ACTION_PRODUCER_HOLD})
	topic := "public/agehold/t"
	createTopicWithSub(t, ctx, adm, topic, "slow")
	p, _ := openProducer(t, cli, topic, "p")
	p.sendOK(0)
	waitFor(t, "the oldest entry older than the quota", func() bool {
		return topicStats(t, adm, topic).GetOldestBacklogAgeSeconds() >= 2
	})
	receipt := make(chan *clientv1.SendReceipt, 1)
	go func() {
		if err := p.st.Send(sendRequest(1, []byte("m1"))); err != nil {
			receipt <- &clientv1.SendReceipt{Error: &clientv1.Error{Message: err.Error()}}
			return
		}
		r, err := p.st.Recv()
		if err != nil {
			receipt <- &clientv1.SendReceipt{Error: &clientv1.Error{Message: err.Error()}}
			return
		}
		receipt <- r.GetReceipt()
	}()
	select {
	case r := <-receipt:
		t.Fatalf("send past the age quota answered while held: %v", r)
	case <-time.After(500 * time.Millisecond):
	}
	if _, err := adm.ClearBacklog(ctx, &clientv1.ClearBacklogRequest{Topic: topic, Subscription: "slow"}); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-receipt:
		if r.GetError() != nil || r.GetMessageId() == nil {
			t.Fatalf("held send: %v", r)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("held send not completed 30 s after the backlog was acknowledged")
	}
}

// TestBacklogEvictionBySize: with consumer_backlog_eviction every send is
// accepted and the subscription's oldest backlog is acknowledged until it
// is within backlog_quota_bytes; the newest messages are still delivered.
func TestBacklogEvictionBySize(t *testing.T) {
	cli, adm, rc := oneBroker(t, func(c *broker.Config) { fastBacklogPass(c); c.RolloverEntries = 5 })
	ctx := context.Background()
	const limit = 1000
	policyNamespace(t, adm, "public/evsize", &clientv1.NamespacePolicies{BacklogQuotaBytes: proto.Int64(limit),
		BacklogQuotaAction: clientv1.QuotaAction_QUOTA_ACTION_CONSUMER_BACKLOG_EVICTION})
	topic := "public/evsize/t"
	createTopicWithSub(t, ctx, adm, topic, "slow")
	p, _ := openProducer(t, cli, topic, "p")
	payload := randomPayload(100)
	const n = 40
	for seq := range int64(n) {
		if r := p.send(seq, payload); r.GetError() != nil {
			t.Fatalf("send %d refused under eviction: %v", seq, r.GetError())
		}
	}
	p.sendOK(n) // "m40", the newest
	waitFor(t, "the backlog evicted to within the quota", func() bool {
		st := topicStats(t, adm, topic)
		return st.GetBacklogSizeBytes() <= limit && st.GetSubscriptions()[0].GetEvictedEntriesTotal() > 0
	})
	s := subStat(t, adm, topic, "slow")
	if s.GetBacklogEntries() == 0 || s.GetBacklogEntries() >= n {
		t.Fatalf("after eviction: %v, want some but not all entries left", s)
	}
	t.Logf("evicted %d entries, %d left", s.GetEvictedEntriesTotal(), s.GetBacklogEntries())
	if s.GetEvictedEntriesTotal()+s.GetBacklogEntries() != n+1 {
		t.Fatalf("evicted %d + backlog %d != %d stored", s.GetEvictedEntriesTotal(), s.GetBacklogEntries(), n+1)
	}
	c := subscribe(t, cli, topic, "slow", clientv1.SubscriptionType_SUBSCRIPTION_TYPE_EXCLUSIVE)
	var last string
	for range s.GetBacklogEntries() {
		_, last = c.next()
	}
	if last != "m40" {
		t.Fatalf("last message delivered after eviction: %q, want m40", last)
	}
	want := fmt.Sprintf(`meridian_broker_evicted_entries_total{namespace="public/evsize",quota="size"} %d`, s.GetEvictedEntriesTotal())
	if body := scrape(t, rc.Broker(0).HTTPAddr()); !strings.Contains(body, want) {
		t.Fatalf("metrics lack %q", want)
	}
}

// scrape returns the broker's /metrics page.
func scrape(t *testing.T, httpAddr string) string {
	t.Helper()
	resp, err := http.Get("http://" + httpAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return string(body)
}

// TestBacklogEvictionByAge: with consumer_backlog_eviction and an age
// quota the entries older than it are acknowledged; younger ones stay.
func TestBacklogEvictionByAge(t *testing.T) {
	cli, adm, _ := oneBroker(t, fastBacklogPass)
	ctx := context.Background()
	const age = 2
	policyNamespace(t, adm, "public/evage", &clientv1.NamespacePolicies{BacklogQuotaAgeSeconds: proto.Int64(age),
		BacklogQuotaAction: clientv1.QuotaAction_QUOTA_ACTION_CONSUMER_BACKLOG_EVICTION})
	topic := "public/evage/t"
	createTopicWithSub(t, ctx, adm, topic, "slow")
	p, _ := openProducer(t, cli, topic, "p")
	for i := range int64(5) {
		p.sendOK(i)
	}
	waitFor(t, "the old entries evicted", func() bool {
		return subStat(t, adm, topic, "slow").GetBacklogEntries() == 0
	})
	young := time.Now()
	for i := range int64(3) {
		p.sendOK(5 + i) // accepted: eviction never refuses
	}
	s := subStat(t, adm, topic, "slow")
	if time.Since(young) < age*time.Second && (s.GetBacklogEntries() != 3 || s.GetEvictedEntriesTotal() != 5) {
		t.Fatalf("after the young sends: %v, want backlog 3 and 5 evicted", s)
	}
	c := subscribe(t, cli, topic, "slow", clientv1.SubscriptionType_SUBSCRIPTION_TYPE_EXCLUSIVE)
	if _, got := c.next(); got != "m5" && time.Since(young) < age*time.Second {
		t.Fatalf("first message: %q, want m5", got)
	}
}

// TestMessageTTLPolicyChangeAppliesToLiveTopic: a TTL set on a namespace
// whose topic is loaded applies at once, not at the next periodic round
// (here a minute away).
func TestMessageTTLPolicyChangeAppliesToLiveTopic(t *testing.T) {
	cli, adm, _ := oneBroker(t, func(c *broker.Config) { c.BacklogPolicyInterval = time.Minute })
	ctx := context.Background()
	policyNamespace(t, adm, "public/ttllive", &clientv1.NamespacePolicies{})
	topic := "public/ttllive/t"
	createTopicWithSub(t, ctx, adm, topic, "s")
	p, _ := openProducer(t, cli, topic, "p")
	for i := range int64(3) {
		p.sendOK(i)
	}
	time.Sleep(1100 * time.Millisecond) // the entries are older than 1 s
	if s := subStat(t, adm, topic, "s"); s.GetBacklogEntries() != 3 {
		t.Fatalf("without a TTL: %v, want backlog 3", s)
	}
	if _, err := adm.SetNamespacePolicies(ctx, &clientv1.SetNamespacePoliciesRequest{Namespace: "public/ttllive",
		Policies: &clientv1.NamespacePolicies{MessageTtlSeconds: proto.Int64(1)}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the new TTL applied to the live topic", func() bool {
		return subStat(t, adm, topic, "s").GetBacklogEntries() == 0
	})
}
