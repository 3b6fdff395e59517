package client_test

import (
	"fmt"
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

// TestDuplicateResolvedWithFirstID: the broker stores a window of batches
// but their receipts never reach the producer; the connection breaks, the
// producer resends the window and the broker drops it as duplicates. Each
// message is resolved with Duplicate set and the ID it was first stored
// under (not UnknownMessageID), and is stored once.
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
	if _, err := adm.CreateTopic(ctx, &clientv1.CreateTopicRequest{Topic: topic}); err != nil {
		t.Fatal(err)
	}
	if _, err := adm.CreateSubscription(ctx, &clientv1.CreateSubscriptionRequest{Topic: topic, Subscription: "s",
		InitialPosition: clientv1.InitialPosition_INITIAL_POSITION_EARLIEST}); err != nil {
		t.Fatal(err)
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

	// Hold the receipts of a window of sends, let the broker store them,
	// then cut the connection: the producer resends the whole window.
	const window = 5
	proxy.hold()
	type result struct {
		m   *client.Message
		id  client.MessageID
		err error
	}
	done := make(chan result, window)
	for i := 1; i <= window; i++ {
		p.SendAsync(ctx, &client.Message{Payload: fmt.Appendf(nil, "m%d", i)}, func(id client.MessageID, m *client.Message, err error) {
			done <- result{m, id, err}
		})
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		st, err := adm.GetTopicStats(ctx, &clientv1.GetTopicStatsRequest{Topic: topic})
		if err == nil && st.GetEntries() == 1+window {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("window not stored: %v %v", st, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	proxy.cut() // their receipts are lost

	resolved := map[string]client.MessageID{}
	for range window {
		var r result
		select {
		case r = <-done:
		case <-time.After(60 * time.Second):
			t.Fatal("window not resolved after the reconnect")
		}
		if r.err != nil {
			t.Fatalf("%s: %v", r.m.Payload, r.err)
		}
		t.Logf("%s resolved at %v, duplicate=%v", r.m.Payload, r.id, r.m.Duplicate)
		if !r.m.Duplicate {
			t.Fatalf("%s was stored again instead of being dropped as a duplicate", r.m.Payload)
		}
		if r.id == client.UnknownMessageID {
			t.Fatalf("duplicate %s resolved with %v, want where it was first stored", r.m.Payload, r.id)
		}
		resolved[string(r.m.Payload)] = r.id
	}
	t.Logf("m0 at %v; producer %+v", id0, p.Stats())
	st, err := adm.GetTopicStats(ctx, &clientv1.GetTopicStatsRequest{Topic: topic})
	if err != nil || st.GetEntries() != 1+window {
		t.Fatalf("entries after the resend: %v %v (want %d)", st.GetEntries(), err, 1+window)
	}
	// Each ID names its message.
	cons, err := c.Subscribe(ctx, client.ConsumerOptions{Topic: topic, Subscription: "s"})
	if err != nil {
		t.Fatal(err)
	}
	for range 1 + window {
		rm, err := cons.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if id, ok := resolved[string(rm.Payload)]; ok && id != rm.ID {
			t.Fatalf("%s is stored at %v, resolved with %v", rm.Payload, rm.ID, id)
		}
	}
}
