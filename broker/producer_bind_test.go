package broker_test

import (
	"context"
	"strings"
	"testing"
	"time"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
	"github.com/meridianmq/meridian/broker"
	"github.com/meridianmq/meridian/region/regiontest"
	"github.com/meridianmq/meridian/security"
	"github.com/meridianmq/meridian/security/securitytest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// secConn connects to addr over TLS with a token for role.
func secConn(t *testing.T, env *securitytest.Env, addr, role string) (clientv1.MeridianClient, clientv1.AdminClient) {
	t.Helper()
	rt, err := security.ClientRuntime(env.CA.CAOnly(), security.StaticToken(env.Token(role)), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Close() })
	cc, err := grpc.NewClient(addr, rt.DialOptions(security.ServerNameOf(addr))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return clientv1.NewMeridianClient(cc), clientv1.NewAdminClient(cc)
}

// openAs opens producer name on topic as role through the topic's owner
// (looked up through the brokers of rc that are not dead); it returns the
// open error.
func openAs(t *testing.T, env *securitytest.Env, rc *regiontest.Cluster, dead, topic, name, role string) (*testProducer, *clientv1.ProducerOpened, error) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		var addr string
		for _, a := range rc.Addrs() {
			if a == dead {
				continue
			}
			cli, _ := secConn(t, env, a, role)
			if r, err := cli.Lookup(context.Background(), &clientv1.LookupRequest{Topic: topic}); err == nil && r.GetBrokerUrl() != dead {
				addr = r.GetBrokerUrl()
				break
			}
		}
		if addr != "" {
			cli, _ := secConn(t, env, addr, role)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			t.Cleanup(cancel)
			st, err := cli.Produce(ctx)
			if err == nil {
				err = st.Send(&clientv1.ProduceRequest{Kind: &clientv1.ProduceRequest_Open{Open: &clientv1.OpenProducer{Topic: topic, ProducerName: name}}})
			}
			var r *clientv1.ProduceResponse
			if err == nil {
				r, err = st.Recv()
			}
			if err == nil {
				return &testProducer{t: t, st: st}, r.GetOpened(), nil
			}
			if status.Code(err) == codes.PermissionDenied || time.Now().After(deadline) {
				return nil, nil, err
			}
		} else if time.Now().After(deadline) {
			t.Fatalf("no owner of %s found", topic)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestProducerNameBoundToRole: with security on, a producer name belongs
// to the role that first stored under it. Another role opening it is
// refused with PermissionDenied naming the producer and not the role (so
// it cannot poison the name's dedup state with a huge sequence_id), also
// after the owner disconnected, after an unload (the binding is in the
// ledger list's dedup snapshot) and after the owner broker crashed (the
// binding is in the stored entries, found by the takeover scan). The same
// role reconnecting continues its sequence; consumers do not see the role.
func TestProducerNameBoundToRole(t *testing.T) {
	env := securitytest.NewEnv(t)
	rc := regiontest.Start(t, regiontest.Options{Brokers: 2, Bookies: 1, Broker: func(_ int, c *broker.Config) {
		c.Security = env.Component(security.ComponentRole(security.KindBroker, regiontest.Region))
		// Authorization is not under test here: the roles may do
		// everything, and the binding still holds between them.
		c.Security.Superusers = []string{"admin", "alice", "mallory"}
	}})
	ctx := context.Background()
	topic := "public/default/bound-names"
	_, adm := secConn(t, env, rc.Addrs()[0], "admin")
	createTopicWithSub(t, ctx, adm, topic, "all")

	refused := func(when, name string) {
		t.Helper()
		_, _, err := openAs(t, env, rc, "", topic, name, "mallory")
		if status.Code(err) != codes.PermissionDenied {
			t.Fatalf("%s: mallory opening %q: %v, want PermissionDenied", when, name, err)
		}
		msg := status.Convert(err).Message()
		if !strings.Contains(msg, name) || !strings.Contains(msg, "another role") || strings.Contains(msg, "alice") {
			t.Fatalf("%s: refusal %q: want it to name the producer and not the role", when, msg)
		}
	}
	p, _, err := openAs(t, env, rc, "", topic, "orders", "alice")
	if err != nil {
		t.Fatal(err)
	}
	for seq := range int64(3) {
		p.sendOK(seq)
	}
	refused("alice connected", "orders")
	_ = p.st.CloseSend()
	refused("alice disconnected", "orders")

	// alice again: her sequence continues.
	p, op, err := openAs(t, env, rc, "", topic, "orders", "alice")
	if err != nil || op.GetLastSequenceId() != 2 {
		t.Fatalf("alice reconnecting: %v, last sequence %d, want 2", err, op.GetLastSequenceId())
	}
	p.sendOK(3)
	_ = p.st.CloseSend()

	// Unloaded: bound through the dedup snapshot.
	if _, err := adm.UnloadTopic(ctx, &clientv1.UnloadTopicRequest{Topic: topic}); err != nil {
		t.Fatal(err)
	}
	refused("after an unload", "orders")

	// A new name, then the owner crashes: bound through the entries.
	p, _, err = openAs(t, env, rc, "", topic, "fresh", "alice")
	if err != nil {
		t.Fatal(err)
	}
	p.sendOK(0)
	var owner int
	for i, a := range rc.Addrs() {
		if cli, _ := secConn(t, env, a, "alice"); cli != nil {
			if r, err := cli.Lookup(ctx, &clientv1.LookupRequest{Topic: topic}); err == nil && r.GetBrokerUrl() == a {
				owner = i
			}
		}
	}
	dead := rc.Addrs()[owner]
	rc.Kill(owner)
	_, _, err = openAs(t, env, rc, dead, topic, "fresh", "mallory")
	if status.Code(err) != codes.PermissionDenied {
		t.Fatalf("after the owner crashed: mallory opening fresh: %v, want PermissionDenied", err)
	}
	p, op, err = openAs(t, env, rc, dead, topic, "fresh", "alice")
	if err != nil || op.GetLastSequenceId() != 0 {
		t.Fatalf("alice after the crash: %v, last sequence %d, want 0", err, op.GetLastSequenceId())
	}
	p.sendOK(1)
	// mallory's own names work; consumers never see a producer's role.
	m, _, err := openAs(t, env, rc, dead, topic, "mallory-own", "mallory")
	if err != nil {
		t.Fatal(err)
	}
	m.sendOK(0)
	cli, _ := secConn(t, env, rc.Addrs()[1-owner], "alice")
	c := subscribe(t, cli, topic, "all", clientv1.SubscriptionType_SUBSCRIPTION_TYPE_EXCLUSIVE)
	for range 7 {
		r, err := c.st.Recv()
		for err == nil && r.GetMessage() == nil {
			r, err = c.st.Recv()
		}
		if err != nil {
			t.Fatal(err)
		}
		if role := r.GetMessage().GetMetadata().GetProducerRole(); role != "" {
			t.Fatalf("message %v delivered with producer_role %q", r.GetMessage().GetMessageId(), role)
		}
	}
}
