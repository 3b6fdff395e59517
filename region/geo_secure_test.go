package region_test

import (
	"context"
	"errors"
	"io"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
	"github.com/meridianmq/meridian/broker"
	"github.com/meridianmq/meridian/client"
	"github.com/meridianmq/meridian/internal/wire"
	"github.com/meridianmq/meridian/security"
	"github.com/meridianmq/meridian/security/securitytest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// geoSecurity is a secured geo cluster's setup: one CA and token key;
// every broker has TLS with certificate broker.<region> and token auth,
// and the helpers' clients present a superuser's token.
type geoSecurity struct {
	t   *testing.T
	env *securitytest.Env
	// clientRole is the helpers' role (a superuser).
	clientRole string
}

func newGeoSecurity(t *testing.T) *geoSecurity {
	return &geoSecurity{t: t, env: securitytest.NewEnv(t), clientRole: "geo-admin"}
}

// apply gives a broker of region its security block.
func (s *geoSecurity) apply(region string, cfg *broker.Config) {
	cfg.Security = s.env.Component(security.ComponentRole(security.KindBroker, region))
	cfg.Security.Superusers = []string{s.clientRole}
}

// client sets the helpers' credentials: the CA and the superuser's token.
func (s *geoSecurity) client(o *client.Options) {
	o.TLSFiles = s.env.CA.CAOnly()
	o.Token = s.env.Token(s.clientRole)
}

// dial connects to addr as role: with a client certificate for role
// (cert) or with a token for it.
func (s *geoSecurity) dial(addr, role string, cert bool) *grpc.ClientConn {
	t := s.t
	t.Helper()
	var rt *security.Runtime
	var err error
	if cert {
		rt, err = security.ClientRuntime(s.env.CA.Files(role), nil, nil)
	} else {
		rt, err = security.ClientRuntime(s.env.CA.CAOnly(), security.StaticToken(s.env.Token(role)), nil)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Close() })
	cc, err := grpc.NewClient(addr, rt.DialOptions(security.ServerNameOf(addr))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// rawRepl is a hand-driven replication stream (a forger's).
type rawRepl struct {
	st     clientv1.Replication_ReplicateClient
	nextID int64
}

// openRawRepl opens a replication stream on cc; the error is the one that
// ended it.
func openRawRepl(t *testing.T, cc *grpc.ClientConn, topic, source, target string) (*rawRepl, *clientv1.ReplicateOpened, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	st, err := clientv1.NewReplicationClient(cc).Replicate(ctx)
	if err != nil {
		return nil, nil, err
	}
	if err := st.Send(&clientv1.ReplicateRequest{Kind: &clientv1.ReplicateRequest_Open{Open: &clientv1.ReplicateOpen{
		Topic: topic, SourceRegion: source, TargetRegion: target}}}); err != nil {
		return nil, nil, err
	}
	r, err := st.Recv()
	if err != nil {
		return nil, nil, err
	}
	return &rawRepl{st: st, nextID: 1}, r.GetOpened(), nil
}

// openRawSubSync opens a subscription sync stream on cc; the error is the
// one that ended it.
func openRawSubSync(t *testing.T, cc *grpc.ClientConn, topic, source, target string) (clientv1.Replication_ReplicateSubscriptionsClient, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	st, err := clientv1.NewReplicationClient(cc).ReplicateSubscriptions(ctx)
	if err != nil {
		return nil, err
	}
	if err := st.Send(&clientv1.SubscriptionSyncRequest{Kind: &clientv1.SubscriptionSyncRequest_Open{Open: &clientv1.SubscriptionSyncOpen{
		Topic: topic, SourceRegion: source, TargetRegion: target}}}); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	// A stream refused before its first message ends with EOF on Send;
	// Recv returns the refusal.
	if _, err := st.Recv(); err != nil {
		return nil, err
	}
	return st, nil
}

// roundTrip sends one request of entries and returns its ack.
func (r *rawRepl) roundTrip(t *testing.T, ents ...[]byte) *clientv1.ReplicateAck {
	t.Helper()
	id := r.nextID
	r.nextID++
	if err := r.st.Send(&clientv1.ReplicateRequest{Kind: &clientv1.ReplicateRequest_Entries{Entries: &clientv1.ReplicateEntries{
		RequestId: id, Entries: ents}}}); err != nil {
		t.Fatal(err)
	}
	resp, err := r.st.Recv()
	if err != nil {
		t.Fatalf("ack of request %d: %v", id, err)
	}
	return resp.GetAck()
}

// forgedEntry is a stored entry as a replicator would ship it, with the
// origin fields given and one message carrying the geo test properties
// (so a reader would count it if it were stored).
func forgedEntry(t *testing.T, origin string, inc uint64, seq int64) []byte {
	t.Helper()
	body, size, err := wire.EncodeBatch(&clientv1.Batch{Messages: []*clientv1.SingleMessage{{Key: "k", Payload: []byte("forged"),
		Properties: map[string]string{"o": origin, "n": "0"}}}}, clientv1.CompressionType_COMPRESSION_TYPE_NONE)
	if err != nil {
		t.Fatal(err)
	}
	md := &clientv1.EntryMetadata{ProducerName: "forger", SequenceId: 1, HighestSequenceId: 1, NumMessages: 1, UncompressedSize: size,
		PublishTimeMs: time.Now().UnixMilli(), OriginRegion: origin, OriginIncarnation: inc, OriginLedgerId: 1, OriginEntryId: 1, OriginSeq: seq}
	data, err := wire.EncodeEntry(md, body)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// TestGeoReplicationIdentities: with security on (TLS, token auth, every
// broker with certificate broker.<region>), a↔b replicate through their
// own identities, and the receiver b refuses:
//   - replication streams from a client role (by token and by
//     certificate), from broker.c (a region not in the topic's replication
//     set) and from broker.c claiming to be a: PermissionDenied;
//   - from broker.a (authorized): a forged jump of a's real origin stream to
//     near 2^63, and a relayed entry of origin c (not in the set):
//     REJECTED, the mark unmoved.
//
// Replication from a continues: every acknowledged message reaches b
// exactly once (0 lost, 0 duplicated, counted).
func TestGeoReplicationIdentities(t *testing.T) {
	sec := newGeoSecurity(t)
	g, topic := geoSetup(t, []string{"a", "b"}, geoOptions{secure: sec})
	rb := g.reader("b", topic)
	pa := g.producer("a", topic)
	pa.send(100)
	g.converge(geoConverge, []*geoReader{rb}, []*geoProducer{pa})

	addrB := g.m.Region("b").Addrs()[0]
	for _, c := range []struct {
		what, role string
		cert       bool
		source     string
	}{
		{"a client role by token", "app", false, "a"},
		{"a client role by certificate", "app", true, "a"},
		{"broker.c, a region not in the replication set", "broker.c", true, "c"},
		{"broker.c claiming to be region a", "broker.c", true, "a"},
		{"broker.b (the receiver's own region) claiming to be a", "broker.b", true, "a"},
	} {
		_, _, err := openRawRepl(t, sec.dial(addrB, c.role, c.cert), topic, c.source, "b")
		if status.Code(err) != codes.PermissionDenied {
			t.Fatalf("replication stream from %s (source_region %s): %v, want PermissionDenied", c.what, c.source, err)
		}
		t.Logf("refused: %s: %v", c.what, status.Convert(err).Message())
	}

	// broker.a itself (a stolen or buggy broker of a): the forged jump of
	// a's real origin stream is refused.
	rs, op, err := openRawRepl(t, sec.dial(addrB, "broker.a", true), topic, "a", "b")
	if err != nil {
		t.Fatalf("replication stream as broker.a: %v", err)
	}
	var stream string
	var inc uint64
	for k := range op.GetApplied() {
		if r, i, _ := strings.Cut(k, "@"); r == "a" {
			stream = k
			if i != "" {
				if inc, err = strconv.ParseUint(i, 10, 64); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	mark := op.GetApplied()[stream]
	if stream == "" || mark < 1 {
		t.Fatalf("opened: applied %v, want a's origin stream", op.GetApplied())
	}
	a := rs.roundTrip(t, forgedEntry(t, "a", inc, math.MaxInt64-1))
	if len(a.GetResults()) != 1 || a.GetResults()[0] != clientv1.ReplicateResult_REPLICATE_RESULT_REJECTED ||
		!strings.Contains(a.GetError().GetMessage(), `origin_region "a"`) {
		t.Fatalf("forged origin jump: results %v error %v, want REJECTED naming origin_region a", a.GetResults(), a.GetError())
	}
	if a.GetApplied()[stream] != mark {
		t.Fatalf("forged origin jump moved the mark: applied %v, was %d", a.GetApplied(), mark)
	}
	t.Logf("refused: forged origin jump: %s", a.GetError().GetMessage())
	a = rs.roundTrip(t, forgedEntry(t, "c", 0, 1))
	if len(a.GetResults()) != 1 || a.GetResults()[0] != clientv1.ReplicateResult_REPLICATE_RESULT_REJECTED ||
		!strings.Contains(a.GetError().GetMessage(), `origin_region "c"`) {
		t.Fatalf("relayed entry of origin c: results %v error %v, want REJECTED naming origin_region c", a.GetResults(), a.GetError())
	}
	t.Logf("refused: relay of an origin outside the set: %s", a.GetError().GetMessage())
	_ = rs.st.CloseSend()

	// Subscription sync follows the same rule.
	for _, c := range []struct {
		what, role string
		cert       bool
		source     string
	}{
		{"a client role by token", "app", false, "a"},
		{"broker.c, a region not in the replication set", "broker.c", true, "c"},
		{"broker.c claiming to be region a", "broker.c", true, "a"},
	} {
		_, err := openRawSubSync(t, sec.dial(addrB, c.role, c.cert), topic, c.source, "b")
		if status.Code(err) != codes.PermissionDenied {
			t.Fatalf("subscription sync stream from %s (source_region %s): %v, want PermissionDenied", c.what, c.source, err)
		}
	}
	ss, err := openRawSubSync(t, sec.dial(addrB, "broker.a", true), topic, "a", "b")
	if err != nil {
		t.Fatalf("subscription sync stream as broker.a: %v", err)
	}
	for i, v := range []*clientv1.AckVector{
		{Origins: map[string]*clientv1.OriginAcks{"c": {MarkDeleteSeq: 1000}}},
		{Scoped: map[string]*clientv1.ScopedAcks{"c": {Origins: map[string]*clientv1.OriginAcks{stream: {MarkDeleteSeq: math.MaxInt64 - 1}}}}},
	} {
		if err := ss.Send(&clientv1.SubscriptionSyncRequest{Kind: &clientv1.SubscriptionSyncRequest_Updates{Updates: &clientv1.SubscriptionUpdates{
			RequestId: int64(i + 1), Updates: []*clientv1.SubscriptionUpdate{{Subscription: "forged", Type: clientv1.SubscriptionType_SUBSCRIPTION_TYPE_SHARED, Vector: v}}}}}); err != nil {
			t.Fatal(err)
		}
		r, err := ss.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if msg := r.GetAck().GetError().GetMessage(); !strings.Contains(msg, `"c" is not a replication region`) {
			t.Fatalf("subscription update %d naming region c: ack %v, want refused naming c", i, r.GetAck())
		}
		t.Logf("refused: subscription update %d: %s", i, r.GetAck().GetError().GetMessage())
	}
	_ = ss.CloseSend()
	if sb, err := g.stats("b", topic); err != nil {
		t.Fatal(err)
	} else {
		for _, sub := range sb.GetSubscriptions() {
			if sub.GetName() == "forged" {
				t.Fatalf("the refused updates created subscription forged in b")
			}
		}
	}

	// The real stream goes on: 0 lost, 0 duplicated.
	pa.send(100)
	g.converge(geoConverge, []*geoReader{rb}, []*geoProducer{pa})
	seen, dups, _, _ := rb.counts()
	if acked := len(pa.ackedKeys()); seen != acked || acked != 200 || dups != 0 {
		t.Fatalf("region b: %d distinct of %d acknowledged (want 200), %d duplicates", seen, acked, dups)
	}
	// b stores exactly a's entries (nothing forged).
	sa, err := g.stats("a", topic)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "b to store exactly a's entries", func() bool {
		sb, err := g.stats("b", topic)
		return err == nil && sb.GetEntries() == sa.GetEntries()
	})
}
