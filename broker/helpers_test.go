package broker_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
	"github.com/meridianmq/meridian/internal/wire"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

func conn(t testing.TB, addr string) (clientv1.MeridianClient, clientv1.AdminClient) {
	t.Helper()
	c, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return clientv1.NewMeridianClient(c), clientv1.NewAdminClient(c)
}

type testProducer struct {
	t  *testing.T
	st clientv1.Meridian_ProduceClient
}

func openProducer(t *testing.T, cli clientv1.MeridianClient, topic, name string) (*testProducer, *clientv1.ProducerOpened) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	st, err := cli.Produce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&clientv1.ProduceRequest{Kind: &clientv1.ProduceRequest_Open{Open: &clientv1.OpenProducer{Topic: topic, ProducerName: name}}}); err != nil {
		t.Fatal(err)
	}
	r, err := st.Recv()
	if err != nil {
		t.Fatalf("open producer: %v", err)
	}
	return &testProducer{t: t, st: st}, r.GetOpened()
}

// sendRequest is a single-message batch (key "k", S2) with sequence seq.
func sendRequest(seq int64, payload []byte) *clientv1.ProduceRequest {
	body, size, _ := wire.EncodeBatch(&clientv1.Batch{Messages: []*clientv1.SingleMessage{{Key: "k", Payload: payload}}}, clientv1.CompressionType_COMPRESSION_TYPE_S2)
	return &clientv1.ProduceRequest{Kind: &clientv1.ProduceRequest_Send{Send: &clientv1.Send{SequenceId: seq, NumMessages: 1,
		Compression: clientv1.CompressionType_COMPRESSION_TYPE_S2, UncompressedSize: size, Payload: body}}}
}

// send sends one single-message batch and waits for its receipt.
func (p *testProducer) send(seq int64, payload []byte) *clientv1.SendReceipt {
	p.t.Helper()
	if err := p.st.Send(sendRequest(seq, payload)); err != nil {
		p.t.Fatal(err)
	}
	r, err := p.st.Recv()
	if err != nil {
		p.t.Fatalf("receipt of %d: %v", seq, err)
	}
	return r.GetReceipt()
}

// sendRefused sends one single-message batch that the broker must not
// acknowledge and fails the test if it does. The refusal is either an
// error receipt or the end of the stream: when an add failure unloads the
// topic, the stream may close ("topic not owned here") before the error
// receipt is written, and both tell the producer the send was not stored.
func (p *testProducer) sendRefused(seq int64, payload []byte) {
	p.t.Helper()
	if err := p.st.Send(sendRequest(seq, payload)); err != nil {
		p.t.Logf("send %d refused: stream closed: %v", seq, err)
		return
	}
	r, err := p.st.Recv()
	switch {
	case err != nil:
		p.t.Logf("send %d refused: stream ended: %v", seq, err)
	case r.GetReceipt().GetError() == nil:
		p.t.Fatalf("send %d acknowledged, want refused: %v", seq, r)
	default:
		p.t.Logf("send %d refused: %v", seq, r.GetReceipt().GetError())
	}
}

func (p *testProducer) sendOK(seq int64) *clientv1.MessageId {
	p.t.Helper()
	r := p.send(seq, fmt.Appendf(nil, "m%d", seq))
	if r.GetError() != nil {
		p.t.Fatalf("send %d: %v", seq, r.GetError())
	}
	return r.GetMessageId()
}

type testConsumer struct {
	t      *testing.T
	buf    []*clientv1.Message // messages received while waiting for an ack answer
	st     clientv1.Meridian_ConsumeClient
	cancel context.CancelFunc
}

// subscribe retries until the broker accepts the consumer.
func subscribe(t *testing.T, cli clientv1.MeridianClient, topic, sub string, typ clientv1.SubscriptionType) *testConsumer {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		st, err := cli.Consume(ctx)
		if err == nil {
			st.Send(&clientv1.ConsumeRequest{Kind: &clientv1.ConsumeRequest_Subscribe{Subscribe: &clientv1.Subscribe{Topic: topic, Subscription: sub, Type: typ,
				InitialPosition: clientv1.InitialPosition_INITIAL_POSITION_EARLIEST}}})
			var r *clientv1.ConsumeResponse
			r, err = st.Recv()
			if err == nil && r.GetSubscribed() != nil {
				st.Send(&clientv1.ConsumeRequest{Kind: &clientv1.ConsumeRequest_Flow{Flow: &clientv1.Flow{Permits: 1000}}})
				c := &testConsumer{t: t, st: st, cancel: cancel}
				t.Cleanup(cancel)
				return c
			}
		}
		cancel()
		if time.Now().After(deadline) {
			t.Fatalf("subscribe %s: %v", sub, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// next returns the next message (skipping control responses).
func (c *testConsumer) next() (*clientv1.MessageId, string) {
	c.t.Helper()
	for {
		var m *clientv1.Message
		if len(c.buf) > 0 {
			m, c.buf = c.buf[0], c.buf[1:]
		} else {
			r, err := c.st.Recv()
			if err != nil {
				c.t.Fatalf("receive: %v", err)
			}
			m = r.GetMessage()
		}
		if m != nil {
			b, err := wire.DecodeBatch(m.Metadata, m.Payload)
			if err != nil {
				c.t.Fatal(err)
			}
			return m.MessageId, string(b.Messages[0].Payload)
		}
	}
}

// nextUntil returns the payloads of the next messages, up to and
// including the first one whose payload is last.
func (c *testConsumer) nextUntil(last string) []string {
	c.t.Helper()
	var got []string
	for {
		_, payload := c.next()
		got = append(got, payload)
		if payload == last {
			return got
		}
	}
}

// ack acknowledges and waits for the broker's answer.
func (c *testConsumer) ack(id *clientv1.MessageId, cumulative bool) *clientv1.Error {
	c.t.Helper()
	if err := c.st.Send(&clientv1.ConsumeRequest{Kind: &clientv1.ConsumeRequest_Ack{Ack: &clientv1.Ack{MessageIds: []*clientv1.MessageId{id}, Cumulative: cumulative, RequestId: 1}}}); err != nil {
		c.t.Fatal(err)
	}
	for {
		r, err := c.st.Recv()
		if err != nil {
			c.t.Fatalf("ack: %v", err)
		}
		if ar := r.GetAckResponse(); ar != nil {
			return ar.GetError()
		}
		if m := r.GetMessage(); m != nil {
			c.buf = append(c.buf, m)
		}
	}
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// createTopicWithSub creates topic and its subscription sub from the
// earliest message.
func createTopicWithSub(t *testing.T, ctx context.Context, adm clientv1.AdminClient, topic, sub string) {
	t.Helper()
	if _, err := adm.CreateTopic(ctx, &clientv1.CreateTopicRequest{Topic: topic}); err != nil {
		t.Fatal(err)
	}
	if _, err := adm.CreateSubscription(ctx, &clientv1.CreateSubscriptionRequest{Topic: topic, Subscription: sub,
		InitialPosition: clientv1.InitialPosition_INITIAL_POSITION_EARLIEST}); err != nil {
		t.Fatal(err)
	}
}
