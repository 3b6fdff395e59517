package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
	"github.com/meridianmq/meridian/internal/wire"
	"github.com/meridianmq/meridian/metadata"
	"github.com/meridianmq/meridian/region/regiontest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// TestPausedOwnerCannotWriteCursor is the fault run of issue 7 as a test,
// with processes: the owning broker is stopped with SIGSTOP past its
// metadata session while it holds an acknowledgement only in memory, the
// topic moves to the other broker, then the owner gets SIGCONT. Its cursor
// persist must fail (the new owner fenced the cursor as it took the topic):
// the value only it holds (mark-delete 69) is never stored, mark-delete never
// moves backwards, and what the new owner's consumer acknowledged stays
// acknowledged.
func TestPausedOwnerCannotWriteCursor(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and starts five processes (-short)")
	}
	const topic, n = "public/default/paused-owner", 100
	dir := t.TempDir()
	cliBinary(t)

	metaGRPC := startMetaProc(t, dir)

	var seed string
	for i := range 2 {
		id, grpcAddr, httpAddr, gossip := fmt.Sprintf("bookie-%d", i+1), cliFreeAddr(t), cliFreeAddr(t), cliFreeAddr(t)
		if seed == "" {
			seed = gossip
		}
		cfg := bookieProcConfig(t, dir, id, grpcAddr, httpAddr, fmt.Sprintf("rack-%d", i), metaGRPC, func(m yamlMap) {
			setGossip(m, gossip, seed)
		})
		b := startProc(t, id, "bookie", "--config", cfg)
		waitHTTP(t, b, "http://"+httpAddr+"/readyz", 90*time.Second)
	}

	type brokerProc struct {
		p          *proc
		grpc, http string
	}
	var brokers []*brokerProc
	for i := range 2 {
		b := &brokerProc{grpc: cliFreeAddr(t), http: cliFreeAddr(t)}
		cfg := brokerProcConfig(t, dir, fmt.Sprintf("broker-%d", i+1), b.grpc, b.http, metaGRPC, func(br yamlMap) {
			br["default_ensemble_size"], br["default_write_quorum"], br["default_ack_quorum"] = 2, 2, 2
			br["session_ttl"] = "2s"
			// Long enough that the acknowledgement made just before the
			// pause is not persisted before it.
			br["cursor_persist_interval"] = "3s"
		})
		b.p = startProc(t, fmt.Sprintf("broker-%d", i+1), "broker", "--config", cfg)
		brokers = append(brokers, b)
	}
	for _, b := range brokers {
		waitHTTP(t, b.p, "http://"+b.http+"/readyz", 90*time.Second)
	}
	store, err := metadata.NewClient(context.Background(), []string{metaGRPC}, "local")
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	cursorKey := "cursors/" + topic + "/s"
	storedMD := func() int64 {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		kv, err := store.Get(ctx, cursorKey, metadata.ReadOptions{})
		if err != nil {
			return -2
		}
		var rec struct {
			MD [2]int64 `json:"md"`
		}
		if json.Unmarshal(kv.Value, &rec) != nil {
			return -2
		}
		return rec.MD[1]
	}

	owner := regiontest.LookupOwner(t, brokers[0].grpc, topic, func(string) bool { return true })
	zi := 0
	if owner == brokers[1].grpc {
		zi = 1
	}
	zombie, next := brokers[zi], brokers[1-zi]
	ids := pzProduce(t, zombie.grpc, topic, n)
	zc := pzSubscribe(t, zombie.grpc, topic, "s")
	for i := range n {
		if got := zc.next(); got != fmt.Sprintf("m%d", i) {
			t.Fatalf("first delivery: got %s, want m%d", got, i)
		}
	}
	zc.ack(ids[39])
	waitFor(t, "mark-delete 39 stored", 60*time.Second, func() (bool, string) {
		md := storedMD()
		return md == 39, fmt.Sprint("stored ", md)
	})
	// Every stored mark-delete from now on, in order.
	wctx, wcancel := context.WithCancel(context.Background())
	defer wcancel()
	events, _ := store.Watch(wctx, cursorKey, 0)
	var mu sync.Mutex
	var stored []int64
	go func() {
		for ev := range events {
			var rec struct {
				MD [2]int64 `json:"md"`
			}
			if ev.Type == metadata.EventPut && json.Unmarshal(ev.KV.Value, &rec) == nil {
				mu.Lock()
				stored = append(stored, rec.MD[1])
				mu.Unlock()
			}
		}
	}()
	// Acknowledge up to 69 (held only in the owner's memory), then pause it.
	zc.ack(ids[69])
	resume := zombie.p.pause(t)
	paused := time.Now()
	if md := storedMD(); md != 39 {
		t.Fatalf("stored mark-delete %d before the pause, want 39 (persist interval too short for this machine?)", md)
	}
	regiontest.LookupOwner(t, next.grpc, topic, func(o string) bool { return o == next.grpc })
	nc := pzSubscribe(t, next.grpc, topic, "s")
	if got := nc.next(); got != "m40" {
		t.Fatalf("new owner delivered %s first, want m40", got)
	}
	t.Logf("topic moved after %v", time.Since(paused).Round(time.Millisecond))
	// Stay paused past a persist interval too, so that on SIGCONT both the
	// persist tick and the keep-alive tick are due: the persist may run
	// before the broker learns that its session expired, as in the run.
	if d := 4*time.Second - time.Since(paused); d > 0 {
		time.Sleep(d)
	}
	logBefore := len(zombie.p.log.String())
	resume()
	waitFor(t, "the resumed owner to notice its session expired", 60*time.Second, func() (bool, string) {
		l := zombie.p.log.String()[logBefore:]
		return strings.Contains(l, "metadata session expired"), tail(l, 2000)
	})
	zlog := zombie.p.log.String()[logBefore:]
	t.Logf("resumed owner's cursor persist refused: %v", strings.Contains(zlog, "changed by another broker"))
	for i := 41; i < 90; i++ {
		if got := nc.next(); got != fmt.Sprintf("m%d", i) {
			t.Fatalf("new owner delivered %s, want m%d", got, i)
		}
	}
	nc.ack(ids[89])
	waitFor(t, "mark-delete 89 stored by the new owner", 60*time.Second, func() (bool, string) {
		md := storedMD()
		return md == 89, fmt.Sprint("stored ", md)
	})
	nc.close()
	zc.close()
	o := regiontest.LookupOwner(t, next.grpc, topic, func(string) bool { return true })
	c := pzSubscribe(t, o, topic, "s")
	seen := map[string]int{}
	first := ""
	for {
		got := c.next()
		if first == "" {
			first = got
		}
		seen[got]++
		if got == fmt.Sprintf("m%d", n-1) {
			break
		}
	}
	if first != "m90" {
		t.Errorf("the subscription restarted at %s, want m90: mark-delete moved backwards", first)
	}
	for i := 90; i < n; i++ {
		if seen[fmt.Sprintf("m%d", i)] == 0 {
			t.Errorf("unacknowledged m%d lost", i)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	t.Logf("stored mark-deletes after the pause began: %v; delivered after reconnecting: %v", stored, seen)
	for i, md := range stored {
		if md == 69 {
			t.Errorf("the paused owner's cursor (mark-delete 69) was stored after the topic moved: %v", stored)
		}
		if i > 0 && md < stored[i-1] {
			t.Errorf("stored mark-delete moved backwards: %v", stored)
		}
	}
}

func pzDial(t *testing.T, addr string) clientv1.MeridianClient {
	t.Helper()
	c, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return clientv1.NewMeridianClient(c)
}

// pzProduce stores m0..m<n-1>, one acknowledged send at a time.
func pzProduce(t *testing.T, addr, topic string, n int) []*clientv1.MessageId {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	st, err := pzDial(t, addr).Produce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&clientv1.ProduceRequest{Kind: &clientv1.ProduceRequest_Open{Open: &clientv1.OpenProducer{Topic: topic, ProducerName: "p"}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); err != nil {
		t.Fatal(err)
	}
	var ids []*clientv1.MessageId
	for i := range n {
		body, size, _ := wire.EncodeBatch(&clientv1.Batch{Messages: []*clientv1.SingleMessage{{Payload: fmt.Appendf(nil, "m%d", i)}}}, clientv1.CompressionType_COMPRESSION_TYPE_NONE)
		if err := st.Send(&clientv1.ProduceRequest{Kind: &clientv1.ProduceRequest_Send{Send: &clientv1.Send{SequenceId: int64(i), NumMessages: 1, UncompressedSize: size, Payload: body}}}); err != nil {
			t.Fatal(err)
		}
		r, err := st.Recv()
		if err != nil || r.GetReceipt().GetError() != nil {
			t.Fatalf("send %d: %v %v", i, r, err)
		}
		ids = append(ids, r.GetReceipt().GetMessageId())
	}
	_ = st.CloseSend()
	return ids
}

type pzConsumer struct {
	t      *testing.T
	st     clientv1.Meridian_ConsumeClient
	buf    []string
	cancel context.CancelFunc
	reqID  uint64
}

func pzSubscribe(t *testing.T, addr, topic, sub string) *pzConsumer {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
		st, err := pzDial(t, addr).Consume(ctx)
		if err == nil {
			err = st.Send(&clientv1.ConsumeRequest{Kind: &clientv1.ConsumeRequest_Subscribe{Subscribe: &clientv1.Subscribe{Topic: topic, Subscription: sub,
				Type: clientv1.SubscriptionType_SUBSCRIPTION_TYPE_EXCLUSIVE, InitialPosition: clientv1.InitialPosition_INITIAL_POSITION_EARLIEST}}})
		}
		var r *clientv1.ConsumeResponse
		if err == nil {
			r, err = st.Recv()
		}
		if err == nil && r.GetSubscribed() != nil {
			_ = st.Send(&clientv1.ConsumeRequest{Kind: &clientv1.ConsumeRequest_Flow{Flow: &clientv1.Flow{Permits: 1000}}})
			c := &pzConsumer{t: t, st: st, cancel: cancel}
			t.Cleanup(cancel)
			return c
		}
		cancel()
		if time.Now().After(deadline) {
			t.Fatalf("subscribe %s via %s: %v", sub, addr, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (c *pzConsumer) next() string {
	c.t.Helper()
	if len(c.buf) > 0 {
		m := c.buf[0]
		c.buf = c.buf[1:]
		return m
	}
	for {
		r, err := c.st.Recv()
		if err != nil {
			c.t.Fatalf("receive: %v", err)
		}
		if m := r.GetMessage(); m != nil {
			return pzPayload(c.t, m)
		}
	}
}

// ack acknowledges cumulatively and waits for the broker's answer.
func (c *pzConsumer) ack(id *clientv1.MessageId) {
	c.t.Helper()
	c.reqID++
	if err := c.st.Send(&clientv1.ConsumeRequest{Kind: &clientv1.ConsumeRequest_Ack{Ack: &clientv1.Ack{MessageIds: []*clientv1.MessageId{id}, Cumulative: true, RequestId: c.reqID}}}); err != nil {
		c.t.Fatal(err)
	}
	for {
		r, err := c.st.Recv()
		if err != nil {
			c.t.Fatalf("ack: %v", err)
		}
		if ar := r.GetAckResponse(); ar != nil {
			if ar.GetError() != nil {
				c.t.Fatalf("ack %v: %v", id, ar.GetError())
			}
			return
		}
		if m := r.GetMessage(); m != nil {
			c.buf = append(c.buf, pzPayload(c.t, m))
		}
	}
}

func (c *pzConsumer) close() { c.cancel() }

func pzPayload(t *testing.T, m *clientv1.Message) string {
	t.Helper()
	b, err := wire.DecodeBatch(m.Metadata, m.Payload)
	if err != nil {
		t.Fatal(err)
	}
	return string(b.Messages[0].Payload)
}
