package client

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
	"google.golang.org/grpc"
)

// hungBroker is a real gRPC server that looks like a broker which opens
// producers and then never acknowledges anything, while its connection
// stays healthy (so keepalive alone cannot notice it).
type hungBroker struct {
	clientv1.UnimplementedMeridianServer
	addr    string
	lookups atomic.Int64
	streams atomic.Int64
}

func (h *hungBroker) Lookup(context.Context, *clientv1.LookupRequest) (*clientv1.LookupResponse, error) {
	h.lookups.Add(1)
	return &clientv1.LookupResponse{BrokerUrl: h.addr}, nil
}

func (h *hungBroker) Produce(st clientv1.Meridian_ProduceServer) error {
	h.streams.Add(1)
	if _, err := st.Recv(); err != nil {
		return err
	}
	if err := st.Send(&clientv1.ProduceResponse{Kind: &clientv1.ProduceResponse_Opened{Opened: &clientv1.ProducerOpened{
		ProducerName: "stalled", LastSequenceId: -1, MaxMessageBytes: 5 << 20}}}); err != nil {
		return err
	}
	for { // swallow every send, answer none
		if _, err := st.Recv(); err != nil {
			return err
		}
	}
}

func startHungBroker(t *testing.T) *hungBroker {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h := &hungBroker{addr: lis.Addr().String()}
	srv := grpc.NewServer()
	clientv1.RegisterMeridianServer(srv, h)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return h
}

// TestProducerDropsStalledStreamAndLooksUpAgain: sends time out on a
// stream whose broker answers nothing (keepalive off, so only the
// timeouts can tell). After StallTimeouts timeouts in a row the producer
// drops the stream, looks the topic up again and opens a new one.
func TestProducerDropsStalledStreamAndLooksUpAgain(t *testing.T) {
	h := startHungBroker(t)
	ctx := context.Background()
	c, err := New(ctx, Options{URL: h.addr, KeepaliveTime: -1, MaxBackoff: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	p, err := c.NewProducer(ctx, ProducerOptions{Topic: "public/default/stalled", BatchingMaxMessages: 1,
		SendTimeout: 300 * time.Millisecond, StallTimeouts: 3})
	if err != nil {
		t.Fatal(err)
	}
	lookups0 := h.lookups.Load()
	var timeouts atomic.Int64
	deadline := time.Now().Add(60 * time.Second)
	for h.streams.Load() < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("no new stream after %d send timeouts (streams %d)", timeouts.Load(), h.streams.Load())
		}
		p.SendAsync(ctx, &Message{Payload: []byte("x")}, func(_ MessageID, _ *Message, err error) {
			if errors.Is(err, ErrSendTimeout) {
				timeouts.Add(1)
			}
		})
		time.Sleep(50 * time.Millisecond) // pace the sends; the condition is polled
	}
	if h.lookups.Load() <= lookups0 {
		t.Fatalf("the producer reconnected without a new lookup (%d lookups)", h.lookups.Load())
	}
	if n := timeouts.Load(); n < 3 {
		t.Fatalf("stream dropped after %d send timeouts, want >= 3", n)
	}
	if st := p.Stats(); st.Reconnects < 1 {
		t.Fatalf("stats: %+v", st)
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_ = p.Close(cctx)
}

func TestOptionsKeepaliveValidation(t *testing.T) {
	for _, o := range []Options{
		{URL: "a:1", KeepaliveTime: 5 * time.Second},
		{URL: "a:1", KeepaliveTimeout: -time.Second},
	} {
		err := o.withDefaults().Validate()
		if !errors.Is(err, ErrInvalidArgument) {
			t.Fatalf("%+v: err %v", o, err)
		}
	}
	if err := (Options{URL: "a:1", KeepaliveTime: -1}).withDefaults().Validate(); err != nil {
		t.Fatalf("disabled keepalive: %v", err)
	}
	if d := DefaultOptions(); d.KeepaliveTime != 10*time.Second || d.KeepaliveTimeout != 5*time.Second {
		t.Fatalf("defaults %v/%v", d.KeepaliveTime, d.KeepaliveTimeout)
	}
}
