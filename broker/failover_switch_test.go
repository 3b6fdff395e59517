package broker_test

import (
	"context"
	"strings"
	"testing"
	"time"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
	"github.com/meridianmq/meridian/broker"
	"github.com/meridianmq/meridian/metadata"
)

// subscribeAs subscribes a named Failover consumer with 1000 permits.
func subscribeAs(t *testing.T, cli clientv1.MeridianClient, topic, sub, name string) *testConsumer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	st, err := cli.Consume(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&clientv1.ConsumeRequest{Kind: &clientv1.ConsumeRequest_Subscribe{Subscribe: &clientv1.Subscribe{Topic: topic, Subscription: sub,
		Type: clientv1.SubscriptionType_SUBSCRIPTION_TYPE_FAILOVER, ConsumerName: name, InitialPosition: clientv1.InitialPosition_INITIAL_POSITION_EARLIEST}}}); err != nil {
		t.Fatal(err)
	}
	for {
		r, err := st.Recv()
		if err != nil {
			t.Fatalf("subscribe %s: %v", name, err)
		}
		if r.GetSubscribed() != nil {
			break
		}
	}
	if err := st.Send(&clientv1.ConsumeRequest{Kind: &clientv1.ConsumeRequest_Flow{Flow: &clientv1.Flow{Permits: 1000}}}); err != nil {
		t.Fatal(err)
	}
	return &testConsumer{t: t, st: st, cancel: cancel}
}

// TestFailoverSwitchLetsPreviousConsumerAck: when a preferred Failover
// consumer joins (as after a topic reload, when the other one reconnected
// first), the previous active consumer's acknowledgements of what it had
// received arrive within the switch delay and those entries are not
// redelivered; the one it did not acknowledge is, before newer entries.
// Before the delay every received entry was redelivered at once (the chaos
// smoke's rep-failover-b: 572 and 296 duplicates after two reloads).
func TestFailoverSwitchLetsPreviousConsumerAck(t *testing.T) {
	cli, _, _ := oneBroker(t, func(c *broker.Config) { c.FailoverSwitchDelay = 3 * time.Second })
	topic := "public/default/failover-switch"
	p, _ := openProducer(t, cli, topic, "p")
	for i := range int64(10) {
		p.sendOK(i)
	}
	b := subscribeAs(t, cli, topic, "s", "b")
	var ids []*clientv1.MessageId
	for i := range 10 {
		id, payload := b.next()
		if want := "m" + string(rune('0'+i)); payload != want {
			t.Fatalf("b got %s, want %s", payload, want)
		}
		ids = append(ids, id)
	}
	// a sorts before b: it becomes the active consumer.
	a := subscribeAs(t, cli, topic, "s", "a")
	for i, id := range ids {
		if i == 5 {
			continue // left unacknowledged: must be redelivered to a
		}
		if e := b.ack(id, false); e != nil {
			t.Fatalf("ack m%d by the previous consumer: %v", i, e)
		}
	}
	p.sendOK(10)
	got := a.nextUntil("m10")
	t.Logf("new active consumer received %v (duplicates: %d)", got, len(got)-2)
	if len(got) != 2 || got[0] != "m5" {
		t.Fatalf("new active consumer received %v, want [m5 m10]: entries the previous consumer acknowledged within the switch delay were redelivered", got)
	}
}

// TestFailoverSwitchDelayLimits: a delay outside [0, 1m] is refused with
// an error naming the field and the limit.
func TestFailoverSwitchDelayLimits(t *testing.T) {
	base := func() broker.Config {
		c := broker.DefaultConfig()
		c.Region = "a"
		c.Global, c.Regional = struct{ metadata.Store }{}, struct{ metadata.Store }{}
		c.Ledgers = struct{ broker.LedgerStore }{}
		return c
	}
	for _, d := range []time.Duration{-time.Millisecond, time.Minute + time.Millisecond} {
		c := base()
		c.FailoverSwitchDelay = d
		err := c.Validate()
		if err == nil || !strings.Contains(err.Error(), "failover_switch_delay") || !strings.Contains(err.Error(), "[0, 1m]") {
			t.Errorf("failover_switch_delay %v: %v, want an error naming the field and the limit", d, err)
		}
	}
	for _, d := range []time.Duration{0, time.Second, time.Minute} {
		c := base()
		c.FailoverSwitchDelay = d
		if err := c.Validate(); err != nil {
			t.Errorf("failover_switch_delay %v refused: %v", d, err)
		}
	}
}
