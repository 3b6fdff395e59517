package broker_test

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
	"github.com/meridianmq/meridian/broker"
	"github.com/meridianmq/meridian/chaos"
	"github.com/meridianmq/meridian/client"
	"github.com/meridianmq/meridian/metadata"
	"github.com/meridianmq/meridian/metadata/metadatatest"
	"github.com/meridianmq/meridian/region/regiontest"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
)

type cutUserV1 struct {
	Name string `json:"name"`
}

type cutUserV2 struct {
	Name  string `json:"name"`
	Email string `json:"email,omitempty"`
}

// TestSchemaRegistryServesWhenGlobalUnreachable cuts a region's broker off
// the global metadata shard (its metadata client dials the global node
// through a link proxy the test cuts), as TestPolicyCacheSurvivesLostGlobalShard
// does: a producer and a typed consumer whose schemas were registered
// before the cut still open and round-trip (the consumer fetches the
// producer's newer version through GetSchema), answered by the policy
// cache's mirror of the registry; a producer with a new schema is refused
// with a retryable UNAVAILABLE saying the schema is new and the global
// metadata is unreachable; after the heal it registers the next version.
func TestSchemaRegistryServesWhenGlobalUnreachable(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 240*time.Second)
	defer cancel()
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
	cli, adm := conn(t, rc.Addrs()[0])

	const ns = "public/sch"
	if _, err := adm.CreateNamespace(ctx, &clientv1.CreateNamespaceRequest{Namespace: ns}); err != nil {
		t.Fatal(err)
	}
	const topic = ns + "/users"
	c, err := client.New(ctx, client.Options{URL: rc.Addrs()[0], InitialBackoff: 50 * time.Millisecond, MaxBackoff: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer ccancel()
		_ = c.Close(cctx)
	})
	s1, err := client.JSONSchema[cutUserV1]()
	if err != nil {
		t.Fatal(err)
	}
	s2, err := client.JSONSchema[cutUserV2]()
	if err != nil {
		t.Fatal(err)
	}
	// Before the cut: versions 1 and 2 registered by producers.
	for i, info := range []*clientv1.SchemaInfo{s1.Info(), s2.Info()} {
		opened, err := openSchemaProducer(ctx, cli, topic, info)
		if err != nil || opened.GetSchemaVersion() != int32(i+1) {
			t.Fatalf("before the cut: producer %d opened %v, %v; want version %d", i, opened, err, i+1)
		}
	}
	// A third version registered by another region's broker straight in
	// the global shard must reach this broker's mirror through its watch.
	v3 := jsonSchemaInfo(`{"type":"object","properties":{"name":{"type":"string"},"email":{"type":"string"},"age":{"type":"integer"}}}`)
	v3.Version, v3.CreatedMs = 3, time.Now().UnixMilli()
	val, err := protojson.Marshal(v3)
	if err != nil {
		t.Fatal(err)
	}
	const v3Key = "schemas/" + topic + "/00000000000000000003"
	if _, err := globalNode.Put(ctx, v3Key, val, metadata.MustNotExist, 0); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "version 3 to reach the broker's mirror through its watch", func() bool {
		return broker.PolicyCachedForTesting(rc.Broker(0), v3Key)
	})

	network.Cut(regiontest.Region, "global", false)
	t.Log("global shard cut off")

	// A typed consumer with version 1 and a typed producer with version 2
	// open and round-trip; the consumer fetches version 2 to decode.
	co, err := client.SubscribeTyped(ctx, c, client.ConsumerOptions{Topic: topic, Subscription: "s", InitialPosition: client.Earliest}, s1)
	if err != nil {
		t.Fatalf("during the cut: typed consumer with registered schema v1: %v", err)
	}
	p, err := client.NewTypedProducer(ctx, c, client.ProducerOptions{Topic: topic}, s2)
	if err != nil {
		t.Fatalf("during the cut: typed producer with registered schema v2: %v", err)
	}
	if p.SchemaVersion() != 2 {
		t.Fatalf("during the cut: producer schema version %d, want 2", p.SchemaVersion())
	}
	if _, err := p.Send(ctx, cutUserV2{Name: "ann", Email: "a@x"}, nil); err != nil {
		t.Fatalf("during the cut: send: %v", err)
	}
	m, err := co.Receive(ctx)
	if err != nil || m.Value.Name != "ann" || m.SchemaVersion != 2 {
		t.Fatalf("during the cut: received %+v, %v; want ann at version 2", m, err)
	}
	if err := co.Ack(ctx, m.ID); err != nil {
		t.Fatal(err)
	}
	// The version learned through the watch opens too.
	if opened, err := openSchemaProducer(ctx, cli, topic, jsonSchemaInfo(string(v3.GetDefinition()))); err != nil || opened.GetSchemaVersion() != 3 {
		t.Fatalf("during the cut: producer with version 3 (registered elsewhere) opened %v, %v", opened, err)
	}
	if r, err := adm.GetSchema(ctx, &clientv1.GetSchemaRequest{Topic: topic, Version: 1}); err != nil || r.GetSchema().GetVersion() != 1 {
		t.Fatalf("during the cut: get version 1: %v, %v", r, err)
	}
	if r, err := adm.GetSchema(ctx, &clientv1.GetSchemaRequest{Topic: topic}); err != nil || r.GetSchema().GetVersion() != 3 {
		t.Fatalf("during the cut: get latest: %v, %v", r, err)
	}

	// A new schema cannot be registered: retryable UNAVAILABLE, saying why.
	v4 := jsonSchemaInfo(`{"type":"object","properties":{"name":{"type":"string"},"email":{"type":"string"},"age":{"type":"integer"},"city":{"type":"string"}}}`)
	_, err = openSchemaProducer(ctx, cli, topic, v4)
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "is new") || !strings.Contains(err.Error(), "global metadata shard") || !strings.Contains(err.Error(), "unreachable") {
		t.Fatalf("during the cut: producer with a new schema: %v; want UNAVAILABLE saying the schema is new and the global metadata is unreachable", err)
	}
	t.Logf("during the cut, a new schema is refused: %v", err)
	if !network.IsCut(regiontest.Region, "global") {
		t.Fatal("link healed early")
	}

	network.Heal(regiontest.Region, "global")
	t.Log("global shard reachable again")
	var opened *clientv1.ProducerOpened
	waitFor(t, "the new schema to register after the heal", func() bool {
		opened, err = openSchemaProducer(ctx, cli, topic, v4)
		return err == nil
	})
	if opened.GetSchemaVersion() != 4 {
		t.Fatalf("after the heal: new schema registered as version %d, want 4", opened.GetSchemaVersion())
	}
	if _, err := p.Send(ctx, cutUserV2{Name: "bob"}, nil); err != nil {
		t.Fatalf("after the heal: send: %v", err)
	}
	if m, err := co.Receive(ctx); err != nil || m.Value.Name != "bob" {
		t.Fatalf("after the heal: received %+v, %v", m, err)
	}
}
