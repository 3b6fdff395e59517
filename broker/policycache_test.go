package broker_test

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
	"github.com/meridianmq/meridian/broker"
	"github.com/meridianmq/meridian/chaos"
	"github.com/meridianmq/meridian/metadata"
	"github.com/meridianmq/meridian/metadata/metadatatest"
	"github.com/meridianmq/meridian/region/regiontest"
	"google.golang.org/protobuf/encoding/protojson"
)

// TestPolicyCacheSurvivesLostGlobalShard cuts a region's broker off the
// global metadata shard (its metadata client dials the global node
// through a link proxy that the test cuts): the region keeps producing and
// consuming on an existing namespace, including a new topic, and reports
// the policies it last saw; a policy change made during the cut applies
// once the link heals.
func TestPolicyCacheSurvivesLostGlobalShard(t *testing.T) {
	ctx := context.Background()
	gm := metadatatest.StartClusterWith(t, 1, metadatatest.Options{GRPC: true})
	globalNode := gm.Store(0, metadata.GlobalShard)
	network := chaos.NewNetwork(nil)
	t.Cleanup(network.Close)
	px, err := network.Proxy(regiontest.Region, "global", "127.0.0.1:0", gm.Endpoints()[0])
	if err != nil {
		t.Fatal(err)
	}
	gc, err := metadata.NewClient(ctx, []string{px.Addr()}, metadata.GlobalShard,
		metadata.WithRequestTimeout(2*time.Second), metadata.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { gc.Close() })
	rc := regiontest.Start(t, regiontest.Options{Brokers: 1, Bookies: 1, Broker: func(_ int, c *broker.Config) { c.Global = gc }})
	// Cleanups run last-in first-out: heal before the brokers stop.
	t.Cleanup(func() { network.Heal(regiontest.Region, "global") })
	b := rc.Broker(0)
	cli, adm := conn(t, rc.Addrs()[0])
	registerRegion(t, globalNode, "b", "127.0.0.1:1")

	const ns = "public/geo"
	if _, err := adm.CreateNamespace(ctx, &clientv1.CreateNamespaceRequest{Namespace: ns}); err != nil {
		t.Fatal(err)
	}
	if _, err := adm.SetNamespaceReplication(ctx, &clientv1.SetNamespaceReplicationRequest{Namespace: ns, Regions: []string{"b"}}); err != nil {
		t.Fatal(err)
	}
	t1 := broker.TopicName{Tenant: "public", Namespace: "geo", Topic: "t1"}
	createTopicWithSub(t, ctx, adm, t1.String(), "s")
	p1, _ := openProducer(t, cli, t1.String(), "p1")
	for i := range int64(5) {
		p1.sendOK(i)
	}
	c1 := subscribe(t, cli, t1.String(), "s", clientv1.SubscriptionType_SUBSCRIPTION_TYPE_EXCLUSIVE)
	if got := c1.nextUntil("m4"); len(got) != 5 {
		t.Fatalf("before the cut: %v", got)
	}
	// Prove the watch is live: an override written straight into the
	// global shard (as another region's admin would) must reach the
	// broker's cache.
	probe := broker.TopicName{Tenant: "public", Namespace: "geo", Topic: "probe"}
	if _, err := globalNode.Put(ctx, "topic-policies/"+probe.String(), []byte(`{"replication_regions":[]}`), metadata.AnyVersion, 0); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the topic override to reach the broker through its watch", func() bool {
		rs, err := b.ReplicationRegions(ctx, probe)
		return err == nil && rs == nil
	})
	want := []string{"b", regiontest.Region}
	if rs, err := b.ReplicationRegions(ctx, t1); err != nil || !slices.Equal(rs, want) {
		t.Fatalf("before the cut: ReplicationRegions %v %v", rs, err)
	}

	network.Cut(regiontest.Region, "global", false)
	t.Log("global shard cut off")
	// Meanwhile the policy changes in the global shard: replication off
	// and a retention change.
	pol := &clientv1.NamespacePolicies{RetentionTimeSeconds: 3600, RetentionSizeBytes: 1 << 20}
	val, _ := protojson.Marshal(pol)
	if _, err := globalNode.Put(ctx, "namespaces/"+ns, val, metadata.AnyVersion, 0); err != nil {
		t.Fatal(err)
	}

	// The region keeps serving: the existing topic, and a new one of the
	// same namespace (lookup, ownership and load read the cached policies).
	for i := int64(5); i < 10; i++ {
		p1.sendOK(i)
	}
	if got := c1.nextUntil("m9"); !slices.Equal(got, []string{"m5", "m6", "m7", "m8", "m9"}) {
		t.Fatalf("during the cut, t1 delivered %v", got)
	}
	t2 := "public/geo/t2"
	p2, _ := openProducer(t, cli, t2, "p2")
	for i := range int64(3) {
		p2.sendOK(i)
	}
	c2 := subscribe(t, cli, t2, "s", clientv1.SubscriptionType_SUBSCRIPTION_TYPE_EXCLUSIVE)
	if got := c2.nextUntil("m2"); !slices.Equal(got, []string{"m0", "m1", "m2"}) {
		t.Fatalf("during the cut, new topic t2 delivered %v", got)
	}
	if rs, err := b.ReplicationRegions(ctx, t1); err != nil || !slices.Equal(rs, want) {
		t.Fatalf("during the cut: ReplicationRegions %v %v, want the last seen %v", rs, err, want)
	}
	got, err := adm.GetNamespaceReplication(ctx, &clientv1.GetNamespaceReplicationRequest{Namespace: ns})
	if err != nil || !slices.Equal(got.Regions, []string{"b"}) || !got.Stale {
		t.Fatalf("during the cut: get-replication %v %v, want [b] stale", got, err)
	}
	if !network.IsCut(regiontest.Region, "global") {
		t.Fatal("link healed early")
	}

	network.Heal(regiontest.Region, "global")
	t.Log("global shard reachable again")
	waitFor(t, "the change made during the cut to apply", func() bool {
		rs, err := b.ReplicationRegions(ctx, t1)
		if err != nil || rs != nil {
			return false
		}
		p, err := adm.GetNamespacePolicies(ctx, &clientv1.GetNamespacePoliciesRequest{Namespace: ns})
		return err == nil && p.Policies.GetRetentionTimeSeconds() == 3600
	})
	got, err = adm.GetNamespaceReplication(ctx, &clientv1.GetNamespaceReplicationRequest{Namespace: ns})
	if err != nil || len(got.Regions) != 0 || got.Stale {
		t.Fatalf("after the heal: get-replication %v %v", got, err)
	}
	// Still serving after the heal; nothing acknowledged was lost (the
	// consumers saw every acknowledged message in order above).
	p1.sendOK(10)
	if got := c1.nextUntil("m10"); !slices.Equal(got, []string{"m10"}) {
		t.Fatalf("after the heal: %v", got)
	}
	t.Logf("acknowledged %d messages on t1 and %d on t2, all delivered once, in order", 11, 3)
}
