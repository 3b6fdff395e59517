package region

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
	"github.com/meridianmq/meridian/broker"
	"github.com/meridianmq/meridian/internal/wire"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

func startSA(t *testing.T, dir string) *Standalone {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sa, err := StartStandalone(ctx, StandaloneConfig{DataDir: dir, GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0",
		Broker: func(c *broker.Config) { c.CursorPersistInterval = 100 * time.Millisecond }})
	if err != nil {
		t.Fatal(err)
	}
	return sa
}

func dial(t *testing.T, addr string) clientv1.MeridianClient {
	t.Helper()
	c, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return clientv1.NewMeridianClient(c)
}

// produce sends n single-message batches and returns the acknowledged IDs.
func produce(t *testing.T, cli clientv1.MeridianClient, topic string, first, n int) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	st, err := cli.Produce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&clientv1.ProduceRequest{Kind: &clientv1.ProduceRequest_Open{Open: &clientv1.OpenProducer{Topic: topic, ProducerName: "p"}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); err != nil {
		t.Fatal(err)
	}
	for i := first; i < first+n; i++ {
		payload, size, _ := wire.EncodeBatch(&clientv1.Batch{Messages: []*clientv1.SingleMessage{{Key: "k", Payload: []byte(fmt.Sprintf("m%d", i))}}}, clientv1.CompressionType_COMPRESSION_TYPE_ZSTD)
		if err := st.Send(&clientv1.ProduceRequest{Kind: &clientv1.ProduceRequest_Send{Send: &clientv1.Send{SequenceId: int64(i), NumMessages: 1,
			Compression: clientv1.CompressionType_COMPRESSION_TYPE_ZSTD, UncompressedSize: size, Payload: payload}}}); err != nil {
			t.Fatal(err)
		}
	}
	var ids []string
	for range n {
		r, err := st.Recv()
		if err != nil {
			t.Fatal(err)
		}
		rc := r.GetReceipt()
		if rc.GetError() != nil {
			t.Fatalf("send %d: %v", rc.GetSequenceId(), rc.GetError())
		}
		ids = append(ids, wire.FormatMessageID(rc.GetMessageId()))
	}
	st.CloseSend()
	return ids
}

// consume reads n messages, acking each, and returns their payloads.
func consume(t *testing.T, cli clientv1.MeridianClient, topic, sub string, n int) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	st, err := cli.Consume(ctx)
	if err != nil {
		t.Fatal(err)
	}
	st.Send(&clientv1.ConsumeRequest{Kind: &clientv1.ConsumeRequest_Subscribe{Subscribe: &clientv1.Subscribe{Topic: topic, Subscription: sub,
		InitialPosition: clientv1.InitialPosition_INITIAL_POSITION_EARLIEST}}})
	st.Send(&clientv1.ConsumeRequest{Kind: &clientv1.ConsumeRequest_Flow{Flow: &clientv1.Flow{Permits: 1000}}})
	var out []string
	for len(out) < n {
		r, err := st.Recv()
		if err != nil {
			t.Fatalf("after %d messages: %v", len(out), err)
		}
		m := r.GetMessage()
		if m == nil {
			continue
		}
		b, err := wire.DecodeBatch(m.Metadata, m.Payload)
		if err != nil {
			t.Fatal(err)
		}
		for _, sm := range b.Messages {
			out = append(out, string(sm.Payload))
		}
		var rid uint64
		if len(out) >= n {
			rid = 2 // the last ack asks for an answer: wait until it is applied
		}
		st.Send(&clientv1.ConsumeRequest{Kind: &clientv1.ConsumeRequest_Ack{Ack: &clientv1.Ack{MessageIds: []*clientv1.MessageId{m.MessageId}, RequestId: rid}}})
	}
	for {
		r, err := st.Recv()
		if err != nil {
			t.Fatalf("waiting for the last ack: %v", err)
		}
		if r.GetAckResponse().GetRequestId() == 2 {
			break
		}
	}
	st.CloseSend()
	return out
}

func TestStandaloneRestartKeepsAckedMessages(t *testing.T) {
	dir := t.TempDir()
	sa := startSA(t, dir)
	resp, err := http.Get("http://" + sa.HTTPAddr() + "/readyz")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("readyz: %v %v", resp, err)
	}
	resp.Body.Close()
	topic := "public/default/restart"
	ids := produce(t, dial(t, sa.GRPCAddr()), topic, 0, 50)
	if len(ids) != 50 {
		t.Fatalf("acked %d", len(ids))
	}
	sa.Close()

	sa2 := startSA(t, dir)
	defer sa2.Close()
	cli := dial(t, sa2.GRPCAddr())
	produce(t, cli, topic, 1000, 10)
	got := consume(t, cli, topic, "s1", 60)
	for i := range 50 {
		if got[i] != fmt.Sprintf("m%d", i) {
			t.Fatalf("message %d = %q", i, got[i])
		}
	}
	// Bad input: clear errors.
	_, err = cli.Lookup(context.Background(), &clientv1.LookupRequest{Topic: "public/default/bad name"})
	if err == nil {
		t.Fatal("bad topic accepted")
	}
	t.Log(err)
	r, _ := http.Post("http://"+sa2.HTTPAddr()+"/admin/v1/ListTenants", "application/json", nil)
	b, _ := io.ReadAll(r.Body)
	t.Logf("tenants: %s", b)
}

func TestStandaloneCrashRestartKeepsAckedMessages(t *testing.T) {
	dir := t.TempDir()
	sa := startSA(t, dir)
	cli := dial(t, sa.GRPCAddr())
	topic := "public/default/crash"
	produce(t, cli, topic, 0, 40)
	// Ack the first 10 and let the cursor persist.
	consume(t, cli, topic, "s", 10)
	time.Sleep(300 * time.Millisecond)
	sa.Kill()

	start := time.Now()
	sa2 := startSA(t, dir)
	defer sa2.Close()
	cli2 := dial(t, sa2.GRPCAddr())
	// The old broker's ownership claim lives until its session expires;
	// produce retries until the topic is taken over.
	var ids []string
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := cli2.Lookup(ctx, &clientv1.LookupRequest{Topic: topic})
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("topic not available after restart: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("topic available %v after restart began", time.Since(start))
	ids = produce(t, cli2, topic, 100, 5)
	got := consume(t, cli2, topic, "s", 35)
	for i := 10; i < 40; i++ {
		if got[i-10] != fmt.Sprintf("m%d", i) {
			t.Fatalf("after crash got %q at %d, want m%d (all: %v)", got[i-10], i-10, i, got)
		}
	}
	if len(ids) != 5 {
		t.Fatal(ids)
	}
}
