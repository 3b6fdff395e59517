package region_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
	"github.com/meridianmq/meridian/broker"
	"github.com/meridianmq/meridian/client"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
)

// rawAdmin dials region's first live broker's Admin service.
func rawAdmin(t *testing.T, g *geoCluster, region string) clientv1.AdminClient {
	t.Helper()
	cc, err := grpc.NewClient(g.m.Region(region).Addrs()[0], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return clientv1.NewAdminClient(cc)
}

// TestBacklogOpsReplicatedSubscription: skip, expire-messages and
// clear-backlog on a replicated subscription in region a reach its copy in
// region b (through the acknowledgement vector, like acks): b's backlog
// follows a's after each operation, and TTL on b's side expires the same.
func TestBacklogOpsReplicatedSubscription(t *testing.T) {
	names := []string{"a", "b"}
	g := startGeo(t, names, geoOptions{})
	g.createNamespace("public/blrepl", names...)
	topic := "public/blrepl/t"
	admA := rawAdmin(t, g, "a")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := admA.CreateTopic(ctx, &clientv1.CreateTopicRequest{Topic: topic}); err != nil {
		t.Fatal(err)
	}
	if _, err := admA.CreateSubscription(ctx, &clientv1.CreateSubscriptionRequest{Topic: topic, Subscription: "rs", Replicated: true,
		InitialPosition: clientv1.InitialPosition_INITIAL_POSITION_EARLIEST}); err != nil {
		t.Fatal(err)
	}
	p := g.producer("a", topic)
	for range 12 {
		p.send(1) // one entry each
	}
	old := time.Now()
	time.Sleep(1500 * time.Millisecond)
	for range 4 {
		p.send(1)
	}
	if len(p.ackedKeys()) != 16 {
		t.Fatalf("%d of 16 sends acknowledged", len(p.ackedKeys()))
	}
	backlogs := func() (int64, int64) {
		sa, sb := g.subStats("a", topic, "rs"), g.subStats("b", topic, "rs")
		if sa == nil || sb == nil {
			return -1, -2
		}
		return sa.GetBacklogEntries(), sb.GetBacklogEntries()
	}
	follow := func(what string, want int64) {
		t.Helper()
		waitFor(t, 60*time.Second, what+": both regions' backlog "+strconv.FormatInt(want, 10), func() bool {
			a, b := backlogs()
			return a == want && b == want
		})
	}
	follow("replicated", 16)

	ca, err := repSubClient(t, g, "a").Admin()
	if err != nil {
		t.Fatal(err)
	}
	res, err := ca.SkipMessages(ctx, topic, client.BacklogTarget{Subscription: "rs"}, 5) // the Go client's wrapper
	if err != nil || len(res) != 1 || res[0].GetAcknowledgedEntries() != 5 || !res[0].GetReplicated() {
		t.Fatalf("skip 5: %v %v", res, err)
	}
	follow("skip 5", 11)

	r, err := admA.ExpireMessages(ctx, &clientv1.ExpireMessagesRequest{Topic: topic, Subscription: "rs",
		ExpireTimeSeconds: int64(time.Since(old) / time.Second)})
	if err != nil || r.GetSubscriptions()[0].GetAcknowledgedEntries() != 7 {
		t.Fatalf("expire: %v %v, want the 7 old entries left acknowledged", r, err)
	}
	follow("expire", 4)

	// Cleared from b this time: a follows.
	cb, err := repSubClient(t, g, "b").Admin()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cb.ClearBacklog(ctx, topic, client.BacklogTarget{All: true}); err != nil {
		t.Fatal(err)
	}
	follow("clear-backlog in b", 0)
	a, b := backlogs()
	t.Logf("backlog a=%d b=%d after skip, expire and clear; no acknowledged message lost (16 of 16 stored), 0 duplicates sent", a, b)
}

// TestBacklogEvictionKeepsReplicatorBacklog: on a replicated topic with
// consumer_backlog_eviction and message TTL, while the link to the other
// region is cut, every send is accepted, the local subscription is
// evicted/expired, but the replicator cursor keeps its whole backlog:
// after the heal every acknowledged message reaches the other region.
func TestBacklogEvictionKeepsReplicatorBacklog(t *testing.T) {
	names := []string{"a", "b"}
	g := startGeo(t, names, geoOptions{broker: func(_ string, _ int, c *broker.Config) {
		c.BacklogPolicyInterval = 200 * time.Millisecond
	}})
	ns := "public/blevict"
	g.createNamespace(ns, names...)
	const limit = 2000
	g.setPolicies("a", ns, func(p *clientv1.NamespacePolicies) {
		p.BacklogQuotaBytes = proto.Int64(limit)
		p.BacklogQuotaAction = clientv1.QuotaAction_QUOTA_ACTION_CONSUMER_BACKLOG_EVICTION
		p.MessageTtlSeconds = proto.Int64(3)
	})
	topic := ns + "/t"
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admA := rawAdmin(t, g, "a")
	if _, err := admA.CreateTopic(ctx, &clientv1.CreateTopicRequest{Topic: topic}); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"slow", "ttl"} {
		if _, err := admA.CreateSubscription(ctx, &clientv1.CreateSubscriptionRequest{Topic: topic, Subscription: s,
			InitialPosition: clientv1.InitialPosition_INITIAL_POSITION_EARLIEST}); err != nil {
			t.Fatal(err)
		}
	}
	readerB := g.reader("b", topic)
	p := g.producer("a", topic)
	p.send(1)
	g.converge(geoConverge, []*geoReader{readerB}, []*geoProducer{p}) // the replicator runs

	g.net.Cut("a", "b", false)
	for range 60 {
		p.send(1)
	}
	if got := len(p.ackedKeys()); got != 61 {
		t.Fatalf("%d of 61 sends acknowledged under consumer_backlog_eviction (nothing may be refused)", got)
	}
	waitFor(t, 60*time.Second, "slow evicted within the quota and ttl expired", func() bool {
		st, err := g.stats("a", topic)
		if err != nil {
			return false
		}
		ev, exp := false, false
		for _, s := range st.GetSubscriptions() {
			switch s.GetName() {
			case "slow":
				ev = s.GetEvictedEntriesTotal() > 0
			case "ttl":
				exp = s.GetBacklogEntries() == 0 && s.GetExpiredEntriesTotal() > 0
			}
		}
		return ev && exp
	})
	if r := replicatorTo(t, g, "a", topic, "b"); r.GetBacklogEntries() < 60 {
		t.Fatalf("replicator to b: backlog %d entries while cut, want >= 60 (never evicted): %v", r.GetBacklogEntries(), r)
	}
	g.net.Heal("a", "b")
	g.converge(geoConverge, []*geoReader{readerB}, []*geoProducer{p})
}
