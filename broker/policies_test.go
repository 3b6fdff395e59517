package broker_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
	"github.com/meridianmq/meridian/broker"
	"github.com/meridianmq/meridian/region/regiontest"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
)

// effective reads a topic's effective policies through the admin API.
func effective(t *testing.T, adm clientv1.AdminClient, topic string) *clientv1.GetEffectivePoliciesResponse {
	t.Helper()
	r, err := adm.GetEffectivePolicies(context.Background(), &clientv1.GetEffectivePoliciesRequest{Topic: topic})
	if err != nil {
		t.Fatalf("effective policies of %s: %v", topic, err)
	}
	return r
}

// waitLive waits until the loaded topic runs with policies that cond accepts.
func waitLive(t *testing.T, s *broker.Server, topic, what string, cond func(*clientv1.NamespacePolicies) bool) {
	t.Helper()
	waitFor(t, topic+": "+what, func() bool {
		p := broker.TopicPoliciesForTesting(s, topic)
		return p != nil && cond(p)
	})
}

func ttlIs(v int64) func(*clientv1.NamespacePolicies) bool {
	return func(p *clientv1.NamespacePolicies) bool {
		return p.MessageTtlSeconds != nil && *p.MessageTtlSeconds == v
	}
}

// TestPrefixPoliciesLongestWins: the longest matching prefix wins for a
// field several prefixes set, a shorter prefix still gives the fields the
// longer one leaves unset, and every change (prefix set, topic override,
// removal) reaches the live topic at once: here deduplication, switched
// off by a prefix while a producer is connected, then on again by the
// topic's override.
func TestPrefixPoliciesLongestWins(t *testing.T) {
	cli, adm, rc := oneBroker(t, nil)
	ctx := context.Background()
	deep, side := "public/default/video/uploaded/v1", "public/default/video/x"
	createTopicWithSub(t, ctx, adm, deep, "s")
	createTopicWithSub(t, ctx, adm, side, "s")
	setPrefix := func(prefix string, p *clientv1.NamespacePolicies, fields ...string) {
		t.Helper()
		if _, err := adm.SetPrefixPolicies(ctx, &clientv1.SetPrefixPoliciesRequest{Prefix: prefix, Policies: p, Fields: fields}); err != nil {
			t.Fatalf("set prefix %s: %v", prefix, err)
		}
	}
	setPrefix("public/default/video/", &clientv1.NamespacePolicies{MessageTtlSeconds: proto.Int64(100), RetentionSizeBytes: 1000})
	setPrefix("public/default/video/uploaded/", &clientv1.NamespacePolicies{MessageTtlSeconds: proto.Int64(200)})
	// A prefix that only shares characters, not segments, applies to nothing.
	setPrefix("public/default/vid/", &clientv1.NamespacePolicies{MessageTtlSeconds: proto.Int64(300)})

	e := effective(t, adm, deep)
	if e.Policies.GetMessageTtlSeconds() != 200 || e.Sources["message_ttl_seconds"] != "prefix:public/default/video/uploaded/" ||
		e.Policies.GetRetentionSizeBytes() != 1000 || e.Sources["retention_size_bytes"] != "prefix:public/default/video/" {
		t.Fatalf("effective policies of %s: %v", deep, e)
	}
	if e := effective(t, adm, side); e.Policies.GetMessageTtlSeconds() != 100 {
		t.Fatalf("effective ttl of %s: %v, want the shorter prefix's 100", side, e)
	}
	if e := effective(t, adm, "public/default/other"); e.Policies.MessageTtlSeconds != nil || len(e.Sources) != 0 {
		t.Fatalf("a topic under no prefix: %v", e)
	}
	srv := rc.Broker(0)
	// The JSON admin API has the same methods.
	resp, err := http.Post("http://"+srv.HTTPAddr()+"/admin/v1/GetEffectivePolicies", "application/json", strings.NewReader(`{"topic":"`+deep+`"}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"prefix:public/default/video/uploaded/"`) {
		t.Fatalf("HTTP GetEffectivePolicies: %s %s", resp.Status, body)
	}
	waitLive(t, srv, deep, "ttl 200 from the longest prefix", ttlIs(200))
	waitLive(t, srv, side, "ttl 100", ttlIs(100))
	lp, err := adm.ListPrefixPolicies(ctx, &clientv1.ListPrefixPoliciesRequest{Namespace: "public/default"})
	if err != nil || len(lp.Prefixes) != 3 || lp.Prefixes[1].Prefix != "public/default/video/" ||
		!slices.Equal(lp.Prefixes[1].Fields, []string{"message_ttl_seconds", "retention_size_bytes"}) {
		t.Fatalf("list prefix policies: %v %v", lp, err)
	}

	// Deduplication follows the effective policy of the live topic.
	p, _ := openProducer(t, cli, deep, "dp")
	for i := range int64(3) {
		p.sendOK(i)
	}
	if r := p.send(1, []byte("again")); !r.GetDuplicate() {
		t.Fatalf("resend with deduplication on: %v", r)
	}
	setPrefix("public/default/video/", &clientv1.NamespacePolicies{DeduplicationEnabled: proto.Bool(false)})
	waitLive(t, srv, deep, "deduplication off from the prefix", func(p *clientv1.NamespacePolicies) bool {
		return p.DeduplicationEnabled != nil && !*p.DeduplicationEnabled
	})
	if r := p.send(1, []byte("again")); r.GetDuplicate() || r.GetError() != nil {
		t.Fatalf("resend with deduplication off: %v, want stored", r)
	}
	p.sendOK(3) // stored while off: still remembered when it is on again
	if _, err := adm.SetTopicPolicies(ctx, &clientv1.SetTopicPoliciesRequest{Topic: deep,
		Policies: &clientv1.NamespacePolicies{DeduplicationEnabled: proto.Bool(true)}}); err != nil {
		t.Fatal(err)
	}
	if e := effective(t, adm, deep); !e.Policies.GetDeduplicationEnabled() || e.Sources["deduplication_enabled"] != "topic" {
		t.Fatalf("topic override of deduplication: %v", e)
	}
	for _, seq := range []int64{2, 3} {
		if r := p.send(seq, []byte("again")); !r.GetDuplicate() {
			t.Fatalf("resend of %d with deduplication on again: %v", seq, r)
		}
	}
	// The side topic still runs without deduplication (the override is the deep topic's).
	waitLive(t, srv, side, "deduplication off", func(p *clientv1.NamespacePolicies) bool { return !p.GetDeduplicationEnabled() })

	// Removing the longer prefix: the shorter one's value applies, live.
	if _, err := adm.RemovePrefixPolicies(ctx, &clientv1.RemovePrefixPoliciesRequest{Prefix: "public/default/video/uploaded/"}); err != nil {
		t.Fatal(err)
	}
	waitLive(t, srv, deep, "ttl 100 after the longer prefix went", ttlIs(100))
	_, err = adm.RemovePrefixPolicies(ctx, &clientv1.RemovePrefixPoliciesRequest{Prefix: "public/default/video/uploaded/"})
	wantCode(t, "remove twice", err, codes.NotFound, "public/default/video/uploaded/")
	// Removing one field of a prefix leaves its other fields.
	if _, err := adm.RemovePrefixPolicies(ctx, &clientv1.RemovePrefixPoliciesRequest{Prefix: "public/default/video/", Fields: []string{"message_ttl_seconds"}}); err != nil {
		t.Fatal(err)
	}
	waitLive(t, srv, deep, "no ttl", func(p *clientv1.NamespacePolicies) bool {
		return p.MessageTtlSeconds == nil && p.RetentionSizeBytes == 1000
	})
}

// TestTopicOverridesInheritAndValidate: a topic override sets only its
// fields and the others follow the namespace, live; the override and the
// replication override share a record without disturbing each other; bad
// input gets an error naming the field and the limit and changes nothing.
func TestTopicOverridesInheritAndValidate(t *testing.T) {
	_, adm, rc := oneBroker(t, nil)
	ctx := context.Background()
	if _, err := adm.CreateNamespace(ctx, &clientv1.CreateNamespaceRequest{Namespace: "public/ov",
		Policies: &clientv1.NamespacePolicies{RetentionTimeSeconds: 3600, RetentionSizeBytes: 1 << 20}}); err != nil {
		t.Fatal(err)
	}
	topic := "public/ov/orders/created"
	createTopicWithSub(t, ctx, adm, topic, "s")
	if _, err := adm.SetTopicPolicies(ctx, &clientv1.SetTopicPoliciesRequest{Topic: topic,
		Policies: &clientv1.NamespacePolicies{MessageTtlSeconds: proto.Int64(60)}}); err != nil {
		t.Fatal(err)
	}
	srv := rc.Broker(0)
	waitLive(t, srv, topic, "ttl 60 with the namespace's retention", func(p *clientv1.NamespacePolicies) bool {
		return p.GetMessageTtlSeconds() == 60 && p.RetentionTimeSeconds == 3600
	})
	// A namespace change reaches the fields the override leaves unset.
	if _, err := adm.SetNamespacePolicies(ctx, &clientv1.SetNamespacePoliciesRequest{Namespace: "public/ov",
		Policies: &clientv1.NamespacePolicies{RetentionTimeSeconds: 7200, RetentionSizeBytes: 1 << 20, MessageTtlSeconds: proto.Int64(5)}}); err != nil {
		t.Fatal(err)
	}
	waitLive(t, srv, topic, "namespace retention 7200, own ttl 60", func(p *clientv1.NamespacePolicies) bool {
		return p.GetMessageTtlSeconds() == 60 && p.RetentionTimeSeconds == 7200
	})
	// An override may set a field to zero: retention 0 is not "unset".
	if _, err := adm.SetTopicPolicies(ctx, &clientv1.SetTopicPoliciesRequest{Topic: topic,
		Policies: &clientv1.NamespacePolicies{}, Fields: []string{"retention_time_seconds"}}); err != nil {
		t.Fatal(err)
	}
	waitLive(t, srv, topic, "retention 0 from the override", func(p *clientv1.NamespacePolicies) bool {
		return p.RetentionTimeSeconds == 0 && p.GetMessageTtlSeconds() == 60
	})

	// The replication override lives in the same record: each survives the other's removal.
	if _, err := adm.SetTopicReplication(ctx, &clientv1.SetTopicReplicationRequest{Topic: topic, Regions: []string{}}); err != nil {
		t.Fatal(err)
	}
	if _, err := adm.RemoveTopicReplication(ctx, &clientv1.RemoveTopicReplicationRequest{Topic: topic}); err != nil {
		t.Fatal(err)
	}
	got, err := adm.GetTopicPolicies(ctx, &clientv1.GetTopicPoliciesRequest{Topic: topic})
	if err != nil || !slices.Equal(got.Fields, []string{"message_ttl_seconds", "retention_time_seconds"}) || got.Policies.GetMessageTtlSeconds() != 60 {
		t.Fatalf("topic policies after the replication override went: %v %v", got, err)
	}
	if _, err := adm.SetTopicReplication(ctx, &clientv1.SetTopicReplicationRequest{Topic: topic, Regions: []string{}}); err != nil {
		t.Fatal(err)
	}
	if _, err := adm.RemoveTopicPolicies(ctx, &clientv1.RemoveTopicPoliciesRequest{Topic: topic}); err != nil {
		t.Fatal(err)
	}
	tr, err := adm.GetTopicReplication(ctx, &clientv1.GetTopicReplicationRequest{Topic: topic})
	if err != nil || !tr.HasOverride {
		t.Fatalf("replication override after the policies went: %v %v", tr, err)
	}
	waitLive(t, srv, topic, "the namespace's ttl again", ttlIs(5))
	_, err = adm.RemoveTopicPolicies(ctx, &clientv1.RemoveTopicPoliciesRequest{Topic: topic})
	wantCode(t, "remove twice", err, codes.NotFound, topic)

	// Bad input: named field and limit, nothing changed.
	if _, err := adm.SetTopicPolicies(ctx, &clientv1.SetTopicPoliciesRequest{Topic: topic,
		Policies: &clientv1.NamespacePolicies{MessageTtlSeconds: proto.Int64(30)}}); err != nil {
		t.Fatal(err)
	}
	before, _ := adm.GetTopicPolicies(ctx, &clientv1.GetTopicPoliciesRequest{Topic: topic})
	bad := []struct {
		what string
		req  *clientv1.SetTopicPoliciesRequest
		want []string
	}{
		{"negative retention", &clientv1.SetTopicPoliciesRequest{Topic: topic, Policies: &clientv1.NamespacePolicies{RetentionTimeSeconds: -5}}, []string{"retention_time_seconds", "-1"}},
		{"quorum above ensemble", &clientv1.SetTopicPoliciesRequest{Topic: topic, Policies: &clientv1.NamespacePolicies{EnsembleSize: 2, WriteQuorum: 3}}, []string{"write_quorum"}},
		{"ensemble over 64", &clientv1.SetTopicPoliciesRequest{Topic: topic, Policies: &clientv1.NamespacePolicies{EnsembleSize: 65}}, []string{"ensemble_size", "64"}},
		{"unknown field", &clientv1.SetTopicPoliciesRequest{Topic: topic, Policies: &clientv1.NamespacePolicies{}, Fields: []string{"colour"}}, []string{"fields[0]", "colour", "allowed"}},
		{"replication regions", &clientv1.SetTopicPoliciesRequest{Topic: topic, Policies: &clientv1.NamespacePolicies{ReplicationRegions: []string{"x"}}}, []string{"replication_regions"}},
		{"nothing to set", &clientv1.SetTopicPoliciesRequest{Topic: topic, Policies: &clientv1.NamespacePolicies{}}, []string{"fields"}},
		{"nine segments", &clientv1.SetTopicPoliciesRequest{Topic: "public/ov/" + strings.Repeat("s/", 8) + "s", Policies: &clientv1.NamespacePolicies{RetentionSizeBytes: 1}}, []string{"9 segments", "limit 8"}},
		{"topic part over 255 bytes", &clientv1.SetTopicPoliciesRequest{Topic: "public/ov/" + strings.Repeat("x", 100) + "/" + strings.Repeat("y", 100) + "/" + strings.Repeat("z", 100), Policies: &clientv1.NamespacePolicies{RetentionSizeBytes: 1}}, []string{"limit 255"}},
		{"empty segment", &clientv1.SetTopicPoliciesRequest{Topic: "public/ov/a//b", Policies: &clientv1.NamespacePolicies{RetentionSizeBytes: 1}}, []string{"segment 2", "empty"}},
	}
	for _, b := range bad {
		_, err := adm.SetTopicPolicies(ctx, b.req)
		wantCode(t, b.what, err, codes.InvalidArgument, b.want...)
	}
	after, _ := adm.GetTopicPolicies(ctx, &clientv1.GetTopicPoliciesRequest{Topic: topic})
	if !proto.Equal(before, after) {
		t.Fatalf("refused changes applied: %v -> %v", before, after)
	}
	_, err = adm.SetPrefixPolicies(ctx, &clientv1.SetPrefixPoliciesRequest{Prefix: "public/ov/orders", Policies: &clientv1.NamespacePolicies{RetentionSizeBytes: 1}})
	wantCode(t, "prefix without trailing slash", err, codes.InvalidArgument, "prefix", "ending in '/'")
	_, err = adm.SetPrefixPolicies(ctx, &clientv1.SetPrefixPoliciesRequest{Prefix: "public/ov/", Policies: &clientv1.NamespacePolicies{RetentionSizeBytes: 1}})
	wantCode(t, "namespace as a prefix", err, codes.InvalidArgument, "at least one segment")
	_, err = adm.SetPrefixPolicies(ctx, &clientv1.SetPrefixPoliciesRequest{Prefix: "public/ov/orders/", Policies: &clientv1.NamespacePolicies{BacklogQuotaBytes: proto.Int64(-7)}})
	wantCode(t, "bad quota on a prefix", err, codes.InvalidArgument, "backlog_quota_bytes")
	_, err = adm.SetPrefixPolicies(ctx, &clientv1.SetPrefixPoliciesRequest{Prefix: "public/nosuch/orders/", Policies: &clientv1.NamespacePolicies{RetentionSizeBytes: 1}})
	wantCode(t, "prefix of a missing namespace", err, codes.NotFound, "public/nosuch")
	if lp, err := adm.ListPrefixPolicies(ctx, &clientv1.ListPrefixPoliciesRequest{Namespace: "public/ov"}); err != nil || len(lp.Prefixes) != 0 {
		t.Fatalf("refused prefix policies stored: %v %v", lp, err)
	}
	if e := effective(t, adm, topic); e.Policies.GetMessageTtlSeconds() != 30 || e.Policies.RetentionTimeSeconds != 7200 {
		t.Fatalf("effective after refused changes: %v", e)
	}

	// A namespace or prefix change may not make a deeper level invalid.
	if _, err := adm.CreateNamespace(ctx, &clientv1.CreateNamespaceRequest{Namespace: "public/q",
		Policies: &clientv1.NamespacePolicies{EnsembleSize: 2, WriteQuorum: 1, AckQuorum: 1}}); err != nil {
		t.Fatal(err)
	}
	if _, err := adm.SetPrefixPolicies(ctx, &clientv1.SetPrefixPoliciesRequest{Prefix: "public/q/x/", Policies: &clientv1.NamespacePolicies{WriteQuorum: 2}}); err != nil {
		t.Fatal(err)
	}
	if _, err := adm.SetTopicPolicies(ctx, &clientv1.SetTopicPoliciesRequest{Topic: "public/q/x/y/t", Policies: &clientv1.NamespacePolicies{AckQuorum: 2}}); err != nil {
		t.Fatal(err)
	}
	_, err = adm.SetNamespacePolicies(ctx, &clientv1.SetNamespacePoliciesRequest{Namespace: "public/q", Policies: &clientv1.NamespacePolicies{EnsembleSize: 1, WriteQuorum: 1, AckQuorum: 1}})
	wantCode(t, "namespace change invalidating a prefix", err, codes.InvalidArgument, "write_quorum 2", "prefix public/q/x/")
	_, err = adm.SetPrefixPolicies(ctx, &clientv1.SetPrefixPoliciesRequest{Prefix: "public/q/x/", Policies: &clientv1.NamespacePolicies{WriteQuorum: 1}})
	wantCode(t, "prefix change invalidating a topic override", err, codes.InvalidArgument, "ack_quorum 2", "topic public/q/x/y/t")
	if e := effective(t, adm, "public/q/x/y/t"); e.Policies.EnsembleSize != 2 || e.Policies.WriteQuorum != 2 || e.Policies.AckQuorum != 2 {
		t.Fatalf("refused changes applied: %v", e)
	}

	// A deleted namespace takes its prefix policies and overrides along:
	// created again, it starts clean.
	if _, err := adm.SetPrefixPolicies(ctx, &clientv1.SetPrefixPoliciesRequest{Prefix: "public/ov/orders/", Policies: &clientv1.NamespacePolicies{RetentionSizeBytes: 1}}); err != nil {
		t.Fatal(err)
	}
	if _, err := adm.DeleteTopic(ctx, &clientv1.DeleteTopicRequest{Topic: topic, Force: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := adm.DeleteNamespace(ctx, &clientv1.DeleteNamespaceRequest{Namespace: "public/ov"}); err != nil {
		t.Fatal(err)
	}
	if _, err := adm.CreateNamespace(ctx, &clientv1.CreateNamespaceRequest{Namespace: "public/ov"}); err != nil {
		t.Fatal(err)
	}
	if e := effective(t, adm, topic); len(e.Sources) != 0 {
		t.Fatalf("policies of the deleted namespace still apply: %v", e)
	}
}

// TestHierarchicalTopicsKeepTheirCursors: a/b/x and a/b/x/y coexist; each
// keeps its own subscriptions and positions across an unload (a
// subscription of a/b/x named "y" included), listings by prefix see both,
// and deleting a/b/x leaves a/b/x/y whole.
func TestHierarchicalTopicsKeepTheirCursors(t *testing.T) {
	cli, adm, _ := oneBroker(t, nil)
	ctx := context.Background()
	x, xy := "public/default/a/b/x", "public/default/a/b/x/y"
	createTopicWithSub(t, ctx, adm, x, "s")
	createTopicWithSub(t, ctx, adm, xy, "s")
	// cursors/<x>/y: a key that is also the prefix of xy's cursors.
	for _, ts := range [][2]string{{x, "y"}, {xy, "deep"}} {
		if _, err := adm.CreateSubscription(ctx, &clientv1.CreateSubscriptionRequest{Topic: ts[0], Subscription: ts[1],
			InitialPosition: clientv1.InitialPosition_INITIAL_POSITION_EARLIEST}); err != nil {
			t.Fatal(err)
		}
	}
	px, _ := openProducer(t, cli, x, "p")
	pxy, _ := openProducer(t, cli, xy, "p")
	for i := range int64(6) {
		px.sendOK(i)
		pxy.sendOK(i + 100)
	}
	// x/s acknowledges m0..m2, xy/s acknowledges m100..m103.
	consumeAck := func(topic, sub string, n int, first int) {
		t.Helper()
		c := subscribe(t, cli, topic, sub, clientv1.SubscriptionType_SUBSCRIPTION_TYPE_EXCLUSIVE)
		var last *clientv1.MessageId
		for i := range n {
			id, payload := c.next()
			if want := fmt.Sprintf("m%d", first+i); payload != want {
				t.Fatalf("%s/%s: got %q, want %q", topic, sub, payload, want)
			}
			last = id
		}
		if e := c.ack(last, true); e != nil {
			t.Fatal(e)
		}
		c.cancel()
	}
	consumeAck(x, "s", 3, 0)
	consumeAck(xy, "s", 4, 100)
	for _, tp := range []string{x, xy} {
		if _, err := adm.UnloadTopic(ctx, &clientv1.UnloadTopicRequest{Topic: tp}); err != nil {
			t.Fatal(err)
		}
	}
	subsOf := func(topic string) []string {
		t.Helper()
		var got []string
		waitFor(t, "subscriptions of "+topic, func() bool {
			r, err := adm.ListSubscriptions(ctx, &clientv1.ListSubscriptionsRequest{Topic: topic})
			if err != nil {
				return false
			}
			got = r.Subscriptions
			return true
		})
		return got
	}
	if got := subsOf(x); !slices.Equal(got, []string{"s", "y"}) {
		t.Fatalf("subscriptions of %s after unload: %v, want [s y]", x, got)
	}
	if got := subsOf(xy); !slices.Equal(got, []string{"deep", "s"}) {
		t.Fatalf("subscriptions of %s after unload: %v, want [deep s]", xy, got)
	}
	// Each resumes where it was.
	consumeAck(x, "s", 3, 3)
	consumeAck(x, "y", 6, 0)
	consumeAck(xy, "s", 2, 104)
	consumeAck(xy, "deep", 6, 100)

	lt, err := adm.ListTopics(ctx, &clientv1.ListTopicsRequest{Namespace: "public/default", Prefix: "a/b/"})
	if err != nil || !slices.Equal(lt.Topics, []string{x, xy}) {
		t.Fatalf("list --prefix a/b/: %v %v", lt, err)
	}
	lt, err = adm.ListTopics(ctx, &clientv1.ListTopicsRequest{Namespace: "public/default", Prefix: "a/b/x/"})
	if err != nil || !slices.Equal(lt.Topics, []string{xy}) {
		t.Fatalf("list --prefix a/b/x/: %v %v", lt, err)
	}
	lt, err = adm.ListTopics(ctx, &clientv1.ListTopicsRequest{Namespace: "public/default"})
	if err != nil || !slices.Contains(lt.Topics, x) || !slices.Contains(lt.Topics, xy) {
		t.Fatalf("list: %v %v", lt, err)
	}

	// Deleting x leaves xy's cursors and data.
	px.st.CloseSend()
	if _, err := adm.DeleteTopic(ctx, &clientv1.DeleteTopicRequest{Topic: x, Force: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := adm.UnloadTopic(ctx, &clientv1.UnloadTopicRequest{Topic: xy}); err != nil {
		t.Fatal(err)
	}
	if got := subsOf(xy); !slices.Equal(got, []string{"deep", "s"}) {
		t.Fatalf("subscriptions of %s after deleting %s: %v", xy, x, got)
	}
	// The unload ended the producer's stream; a new one resumes its sequence.
	pxy2, opened := openProducer(t, cli, xy, "p")
	if opened.LastSequenceId != 105 {
		t.Fatalf("%s: last sequence %d after deleting %s, want 105", xy, opened.LastSequenceId, x)
	}
	pxy2.sendOK(106)
	consumeAck(xy, "s", 1, 106)
}

// TestPrefixPoliciesReplicated: prefix policies live in the global shard:
// set in region a, they apply in region b to the replicated copy of a
// hierarchical topic, live, and a change made in a reaches b's live topic.
func TestPrefixPoliciesReplicated(t *testing.T) {
	m := regiontest.StartRegions(t, regiontest.MultiOptions{Regions: []string{"a", "b"}, Brokers: 1, Bookies: 1})
	ctx := context.Background()
	ra, rb := m.Region("a"), m.Region("b")
	cliA, admA := conn(t, ra.Addrs()[0])
	cliB, admB := conn(t, rb.Addrs()[0])
	if _, err := admA.CreateNamespace(ctx, &clientv1.CreateNamespaceRequest{Namespace: "public/geo"}); err != nil {
		t.Fatal(err)
	}
	if _, err := admA.SetNamespaceReplication(ctx, &clientv1.SetNamespaceReplicationRequest{Namespace: "public/geo", Regions: []string{"a", "b"}}); err != nil {
		t.Fatal(err)
	}
	topic := "public/geo/video/uploaded/v1"
	if _, err := admA.SetPrefixPolicies(ctx, &clientv1.SetPrefixPoliciesRequest{Prefix: "public/geo/video/",
		Policies: &clientv1.NamespacePolicies{MessageTtlSeconds: proto.Int64(3600), RetentionSizeBytes: 4096}}); err != nil {
		t.Fatal(err)
	}
	// Region b sees it through its own policy cache.
	waitFor(t, "prefix policy in region b", func() bool {
		r, err := admB.GetEffectivePolicies(ctx, &clientv1.GetEffectivePoliciesRequest{Topic: topic})
		return err == nil && r.Policies.GetMessageTtlSeconds() == 3600 && slices.Equal(r.ReplicationRegions, []string{"a", "b"})
	})
	// b subscribes first (its copy of the topic loads there), a produces.
	createTopicWithSub(t, ctx, admB, topic, "sb")
	createTopicWithSub(t, ctx, admA, topic, "sa")
	p, _ := openProducer(t, cliA, topic, "p")
	for i := range int64(5) {
		p.sendOK(i)
	}
	cb := subscribe(t, cliB, topic, "sb", clientv1.SubscriptionType_SUBSCRIPTION_TYPE_EXCLUSIVE)
	for i := range 5 {
		if _, payload := cb.next(); payload != fmt.Sprintf("m%d", i) {
			t.Fatalf("region b got %q, want m%d", payload, i)
		}
	}
	waitLive(t, rb.Broker(0), topic, "prefix ttl in region b", ttlIs(3600))
	waitLive(t, ra.Broker(0), topic, "prefix ttl in region a", ttlIs(3600))
	// A change in region a reaches the live topic in region b.
	if _, err := admA.SetPrefixPolicies(ctx, &clientv1.SetPrefixPoliciesRequest{Prefix: "public/geo/video/uploaded/",
		Policies: &clientv1.NamespacePolicies{MessageTtlSeconds: proto.Int64(60)}}); err != nil {
		t.Fatal(err)
	}
	waitLive(t, rb.Broker(0), topic, "longer prefix's ttl in region b", func(p *clientv1.NamespacePolicies) bool {
		return p.GetMessageTtlSeconds() == 60 && p.RetentionSizeBytes == 4096
	})
	// And a topic override set in b reaches a.
	if _, err := admB.SetTopicPolicies(ctx, &clientv1.SetTopicPoliciesRequest{Topic: topic,
		Policies: &clientv1.NamespacePolicies{MessageTtlSeconds: proto.Int64(7)}}); err != nil {
		t.Fatal(err)
	}
	waitLive(t, ra.Broker(0), topic, "topic override in region a", ttlIs(7))
}

// TestPartitionsInheritTopicOverride: the partitions of a partitioned topic
// run with the partitioned topic's override (as Pulsar's topic policies
// apply to every partition), a partition's own override overlays it, and a
// change of the base override reaches loaded partitions live.
func TestPartitionsInheritTopicOverride(t *testing.T) {
	_, adm, rc := oneBroker(t, nil)
	ctx := context.Background()
	const base = "public/default/orders"
	if _, err := adm.CreatePartitionedTopic(ctx, &clientv1.CreatePartitionedTopicRequest{Topic: base, Partitions: 2}); err != nil {
		t.Fatal(err)
	}
	p0, p1 := broker.PartitionName(base, 0), broker.PartitionName(base, 1)
	createTopicWithSub(t, ctx, adm, p0, "s")
	createTopicWithSub(t, ctx, adm, p1, "s")
	setTopic := func(topic string, p *clientv1.NamespacePolicies) {
		t.Helper()
		if _, err := adm.SetTopicPolicies(ctx, &clientv1.SetTopicPoliciesRequest{Topic: topic, Policies: p}); err != nil {
			t.Fatalf("set override of %s: %v", topic, err)
		}
	}
	setTopic(base, &clientv1.NamespacePolicies{MessageTtlSeconds: proto.Int64(60), RetentionSizeBytes: 4096})
	setTopic(p1, &clientv1.NamespacePolicies{MessageTtlSeconds: proto.Int64(30)})
	if e := effective(t, adm, p0); e.Policies.GetMessageTtlSeconds() != 60 || e.Policies.GetRetentionSizeBytes() != 4096 {
		t.Fatalf("partition 0 does not inherit the partitioned topic's override: %v", e)
	}
	if e := effective(t, adm, p1); e.Policies.GetMessageTtlSeconds() != 30 || e.Policies.GetRetentionSizeBytes() != 4096 {
		t.Fatalf("partition 1's own override does not overlay the inherited one: %v", e)
	}
	srv := rc.Broker(0)
	waitLive(t, srv, p0, "ttl 60 from the partitioned topic", ttlIs(60))
	waitLive(t, srv, p1, "ttl 30 from its own override", ttlIs(30))
	setTopic(base, &clientv1.NamespacePolicies{MessageTtlSeconds: proto.Int64(90)})
	waitLive(t, srv, p0, "ttl 90 after the partitioned topic's change", ttlIs(90))
	waitLive(t, srv, p1, "still its own ttl 30", ttlIs(30))
}
