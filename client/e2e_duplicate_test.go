package client_test

import (
	"net"
	"sync"
	"testing"
	"time"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
	"github.com/meridianmq/meridian/broker"
	"github.com/meridianmq/meridian/client"
	"github.com/meridianmq/meridian/region/regiontest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// holdProxy forwards TCP connections to a target. While held, nothing goes
// from the target back to the clients (their requests still go through);
// cut closes every connection, as a network failure would.
type holdProxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	held  chan struct{} // non-nil while held; closed by cut
	conns []net.Conn
}

func startHoldProxy(t *testing.T, target string) *holdProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &holdProxy{ln: ln, target: target}
	t.Cleanup(func() { ln.Close(); p.cut() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, s)
			p.mu.Unlock()
			go p.pipe(s, c, false)
			go p.pipe(c, s, true)
		}
	}()
	return p
}

func (p *holdProxy) pipe(dst, src net.Conn, toClient bool) {
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && toClient {
			p.mu.Lock()
			h := p.held
			p.mu.Unlock()
			if h != nil {
				<-h
				return // cut: what was held is never delivered
			}
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *holdProxy) hold() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.held = make(chan struct{})
}

func (p *holdProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
	if p.held != nil {
		close(p.held)
		p.held = nil
	}
}

// TestDuplicateResolvedWithFirstID: the broker stores a batch but its
// receipt never reaches the producer; the connection breaks, the producer
// resends the batch and the broker drops it as a duplicate. The message is
// resolved with Duplicate set and the ID it was first stored under (not
// UnknownMessageID), and it is stored once.
func TestDuplicateResolvedWithFirstID(t *testing.T) {
	brokerAddr := freeAddr(t)
	var proxy *holdProxy
	proxyAddr := make(chan string, 1)
	regiontest.Start(t, regiontest.Options{Brokers: 1, Bookies: 1, Broker: func(_ int, c *broker.Config) {
		p := startHoldProxy(t, brokerAddr)
		proxy = p
		c.GRPCAddress = brokerAddr
		c.AdvertisedGRPC = p.ln.Addr().String()
		proxyAddr <- c.AdvertisedGRPC
	}})
	url := <-proxyAddr
	direct, err := grpc.NewClient(brokerAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { direct.Close() })
	adm := clientv1.NewAdminClient(direct)

	c := newClient(t, url)
	ctx := tctx(t, 120*time.Second)
	topic := "public/default/dup-id"
	if _, err := adm.CreateSubscription(ctx, &clientv1.CreateSubscriptionRequest{Topic: topic, Subscription: "s",
		InitialPosition: clientv1.InitialPosition_INITIAL_POSITION_EARLIEST}); err != nil {
		// The topic does not exist yet: create it first.
		if _, err := adm.CreateTopic(ctx, &clientv1.CreateTopicRequest{Topic: topic}); err != nil {
			t.Fatal(err)
		}
		if _, err := adm.CreateSubscription(ctx, &clientv1.CreateSubscriptionRequest{Topic: topic, Subscription: "s",
			InitialPosition: clientv1.InitialPosition_INITIAL_POSITION_EARLIEST}); err != nil {
			t.Fatal(err)
		}
	}
	p, err := c.NewProducer(ctx, client.ProducerOptions{Topic: topic, Name: "dup-id", BatchingMaxMessages: 1})
	if err != nil {
		t.Fatal(err)
	}
	m0 := &client.Message{Payload: []byte("m0")}
	id0, err := p.Send(ctx, m0)
	if err != nil || m0.Duplicate {
		t.Fatalf("first send: %v %v duplicate=%v", id0, err, m0.Duplicate)
	}

	proxy.hold()
	m1 := &client.Message{Payload: []byte("m1")}
	type result struct {
		id  client.MessageID
		err error
	}
	done := make(chan result, 1)
	p.SendAsync(ctx, m1, func(id client.MessageID, _ *client.Message, err error) { done <- result{id, err} })
	deadline := time.Now().Add(60 * time.Second)
	for {
		st, err := adm.GetTopicStats(ctx, &clientv1.GetTopicStatsRequest{Topic: topic})
		if err == nil && st.GetEntries() == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("m1 not stored: %v %v", st, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	proxy.cut() // the receipt of m1 is lost

	var r result
	select {
	case r = <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("m1 not resolved after the reconnect")
	}
	if r.err != nil {
		t.Fatalf("m1: %v", r.err)
	}
	t.Logf("m0 at %v; m1 resolved at %v, duplicate=%v; producer %+v", id0, r.id, m1.Duplicate, p.Stats())
	if !m1.Duplicate {
		t.Fatal("m1 was stored again instead of being dropped as a duplicate")
	}
	if r.id == client.UnknownMessageID || r.id.LedgerID != id0.LedgerID || r.id.EntryID != id0.EntryID+1 {
		t.Fatalf("duplicate m1 resolved with %v, want where it was first stored (after m0 at %v)", r.id, id0)
	}
	st, err := adm.GetTopicStats(ctx, &clientv1.GetTopicStatsRequest{Topic: topic})
	if err != nil || st.GetEntries() != 2 {
		t.Fatalf("entries after the resend: %v %v (want 2)", st.GetEntries(), err)
	}
	// The ID names the message.
	cons, err := c.Subscribe(ctx, client.ConsumerOptions{Topic: topic, Subscription: "s"})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		rm, err := cons.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if rm.ID == r.id && string(rm.Payload) != "m1" {
			t.Fatalf("ID %v holds %q, not m1", r.id, rm.Payload)
		}
		if string(rm.Payload) == "m1" && rm.ID != r.id {
			t.Fatalf("m1 is stored at %v, resolved with %v", rm.ID, r.id)
		}
	}
}
