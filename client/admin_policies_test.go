package client_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/meridianmq/meridian/client"
	"google.golang.org/protobuf/proto"
)

// TestE2EHierarchicalTopicAndPolicies: the client produces to and consumes
// from a topic with segments below the namespace, lists it by prefix, and
// sets, reads and removes prefix and topic policies through Admin.
func TestE2EHierarchicalTopicAndPolicies(t *testing.T) {
	sa := startStandalone(t)
	c := newClient(t, sa.GRPCAddr())
	ctx := tctx(t, 60*time.Second)
	const topic = "public/default/video/uploaded/v1"
	co, err := c.Subscribe(ctx, client.ConsumerOptions{Topic: topic, Subscription: "s", InitialPosition: client.Earliest})
	if err != nil {
		t.Fatal(err)
	}
	p, err := c.NewProducer(ctx, client.ProducerOptions{Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	produceN(t, p, 0, 10)
	for i, m := range receiveN(t, co, 10, 60*time.Second, true) {
		if string(m.Payload) != fmt.Sprintf("m%d", i) {
			t.Fatalf("message %d: %q", i, m.Payload)
		}
	}
	a, err := c.Admin()
	if err != nil {
		t.Fatal(err)
	}
	ts, err := a.ListTopicsWithPrefix(ctx, "public/default", "video/")
	if err != nil || !slices.Equal(ts, []string{topic}) {
		t.Fatalf("ListTopicsWithPrefix: %v %v", ts, err)
	}
	if err := a.SetPrefixPolicies(ctx, "public/default/video/", &client.NamespacePolicies{MessageTtlSeconds: proto.Int64(120)}); err != nil {
		t.Fatal(err)
	}
	if err := a.SetTopicPolicies(ctx, topic, &client.NamespacePolicies{RetentionSizeBytes: 1 << 20}, "retention_size_bytes"); err != nil {
		t.Fatal(err)
	}
	ps, err := a.ListPrefixPolicies(ctx, "public/default")
	if err != nil || len(ps) != 1 || ps[0].GetPrefix() != "public/default/video/" {
		t.Fatalf("ListPrefixPolicies: %v %v", ps, err)
	}
	e, err := a.EffectivePolicies(ctx, topic)
	if err != nil || e.GetPolicies().GetMessageTtlSeconds() != 120 || e.GetPolicies().GetRetentionSizeBytes() != 1<<20 || e.GetSources()["retention_size_bytes"] != "topic" {
		t.Fatalf("EffectivePolicies: %v %v", e, err)
	}
	if err := a.RemoveTopicPolicies(ctx, topic); err != nil {
		t.Fatal(err)
	}
	if _, fields, err := a.GetTopicPolicies(ctx, topic); err != nil || len(fields) != 0 {
		t.Fatalf("GetTopicPolicies after remove: %v %v", fields, err)
	}
	if err := a.RemovePrefixPolicies(ctx, "public/default/video/", "message_ttl_seconds"); err != nil {
		t.Fatal(err)
	}
	// Bad input is refused with the field named.
	if err := a.SetPrefixPolicies(ctx, "public/default/video", &client.NamespacePolicies{MessageTtlSeconds: proto.Int64(1)}); err == nil ||
		!strings.Contains(err.Error(), "ending in '/'") {
		t.Fatalf("prefix without a trailing '/': %v, want a refusal saying it must end in '/'", err)
	}
}
