package region

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
	"github.com/meridianmq/meridian/bookie/ledger"
	"github.com/meridianmq/meridian/internal/wire"
	"github.com/meridianmq/meridian/region/regiontest"
	"github.com/meridianmq/meridian/topology"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

func TestFailoverKillOwnerKeepsAckedMessages(t *testing.T) {
	rc := regiontest.Start(t, regiontest.Options{Brokers: 2, Bookies: 3})
	addrs := rc.Addrs()
	topic := "public/default/failover"
	owner := regiontest.LookupOwner(t, addrs[0], topic, func(string) bool { return true })
	oi := 0
	if owner == addrs[1] {
		oi = 1
	}
	acked := produce(t, dial(t, owner), topic, 0, 30)
	rc.Kill(oi)
	other := addrs[1-oi]
	regiontest.LookupOwner(t, other, topic, func(o string) bool { return o == other })
	acked = append(acked, produce(t, dial(t, other), topic, 100, 30)...)
	got := consume(t, dial(t, other), topic, "s", 60)
	seen := map[string]int{}
	for _, p := range got {
		seen[p]++
	}
	dups := 0
	for _, n := range seen {
		dups += n - 1
	}
	for i := range 30 {
		if seen[fmt.Sprintf("m%d", i)] == 0 || seen[fmt.Sprintf("m%d", 100+i)] == 0 {
			t.Fatalf("acknowledged message lost (i=%d); got %v", i, got)
		}
	}
	t.Logf("acked %d, received %d, duplicates %d", len(acked), len(got), dups)
}

func TestZombieOwnerCannotWriteAfterTakeover(t *testing.T) {
	rc := regiontest.Start(t, regiontest.Options{Brokers: 2, Bookies: 3})
	addrs := rc.Addrs()
	topic := "public/default/zombie"
	owner := regiontest.LookupOwner(t, addrs[0], topic, func(string) bool { return true })
	oi := 0
	if owner == addrs[1] {
		oi = 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// A producer stays connected to the soon-to-be zombie.
	st, err := dial(t, owner).Produce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	st.Send(&clientv1.ProduceRequest{Kind: &clientv1.ProduceRequest_Open{Open: &clientv1.OpenProducer{Topic: topic, ProducerName: "z"}}})
	if _, err := st.Recv(); err != nil {
		t.Fatal(err)
	}
	send := func(seq int64) (*clientv1.SendReceipt, error) {
		payload, size, _ := wire.EncodeBatch(&clientv1.Batch{Messages: []*clientv1.SingleMessage{{Payload: []byte(fmt.Sprintf("z%d", seq))}}}, clientv1.CompressionType_COMPRESSION_TYPE_NONE)
		if err := st.Send(&clientv1.ProduceRequest{Kind: &clientv1.ProduceRequest_Send{Send: &clientv1.Send{SequenceId: seq, NumMessages: 1, UncompressedSize: size, Payload: payload}}}); err != nil {
			return nil, err
		}
		r, err := st.Recv()
		return r.GetReceipt(), err
	}
	ackedZ := map[string]bool{}
	for i := range int64(5) {
		r, err := send(i)
		if err != nil || r.GetError() != nil {
			t.Fatalf("send before pause: %v %v", r, err)
		}
		ackedZ[fmt.Sprintf("z%d", i)] = true
	}
	rc.Pause(oi)
	other := addrs[1-oi]
	regiontest.LookupOwner(t, other, topic, func(o string) bool { return o == other })
	// The new owner recovered (fenced) the zombie's ledger: the zombie's
	// adds must fail, never be acknowledged.
	r, err := send(5)
	if err == nil && r.GetError() == nil {
		t.Fatalf("zombie acknowledged a write after takeover: %v", r)
	}
	t.Logf("zombie write refused: receipt=%v err=%v", r, err)
	got := consume(t, dial(t, other), topic, "s", 5)
	for _, p := range got {
		delete(ackedZ, p)
	}
	if len(ackedZ) > 0 {
		t.Fatalf("acknowledged messages lost: %v", ackedZ)
	}
	produce(t, dial(t, other), topic, 0, 3)
}

// liveProducer sends total single-message batches one at a time to topic,
// reconnecting (new lookup through any of addrs) and resending the same
// sequence ID after any failure, as a client library does. Each
// acknowledged sequence is sent on progress.
type liveProducer struct {
	mu       sync.Mutex
	acked    map[int64]bool
	dupAcks  int
	reopens  int
	progress chan int64
	done     chan error
}

func startLiveProducer(t *testing.T, addrs []string, topic string, total int64) *liveProducer {
	lp := &liveProducer{acked: map[int64]bool{}, progress: make(chan int64, total), done: make(chan error, 1)}
	go func() {
		deadline := time.Now().Add(90 * time.Second)
		var st clientv1.Meridian_ProduceClient
		var cancel context.CancelFunc = func() {}
		defer func() { cancel() }()
		connect := func() error {
			cancel()
			for time.Now().Before(deadline) {
				for _, a := range addrs {
					cli := dial(t, a)
					lctx, lcancel := context.WithTimeout(context.Background(), 3*time.Second)
					r, err := cli.Lookup(lctx, &clientv1.LookupRequest{Topic: topic})
					lcancel()
					if err != nil {
						continue
					}
					var ctx context.Context
					ctx, cancel = context.WithCancel(context.Background())
					s, err := dial(t, r.BrokerUrl).Produce(ctx)
					if err == nil {
						err = s.Send(&clientv1.ProduceRequest{Kind: &clientv1.ProduceRequest_Open{Open: &clientv1.OpenProducer{Topic: topic, ProducerName: "live"}}})
					}
					if err == nil {
						_, err = s.Recv()
					}
					if err == nil {
						st = s
						lp.mu.Lock()
						lp.reopens++
						lp.mu.Unlock()
						return nil
					}
					cancel()
				}
				time.Sleep(100 * time.Millisecond)
			}
			return fmt.Errorf("could not reconnect before the deadline")
		}
		if err := connect(); err != nil {
			lp.done <- err
			return
		}
		for seq := int64(0); seq < total; {
			if time.Now().After(deadline) {
				lp.done <- fmt.Errorf("producer stuck at %d", seq)
				return
			}
			payload, size, _ := wire.EncodeBatch(&clientv1.Batch{Messages: []*clientv1.SingleMessage{{Payload: []byte(fmt.Sprintf("m%d", seq))}}}, clientv1.CompressionType_COMPRESSION_TYPE_NONE)
			err := st.Send(&clientv1.ProduceRequest{Kind: &clientv1.ProduceRequest_Send{Send: &clientv1.Send{SequenceId: seq, NumMessages: 1, UncompressedSize: size, Payload: payload}}})
			var r *clientv1.ProduceResponse
			if err == nil {
				r, err = st.Recv()
			}
			if err == nil && r.GetReceipt().GetError() != nil {
				err = fmt.Errorf("receipt: %v", r.GetReceipt().GetError())
			}
			if err != nil {
				if cerr := connect(); cerr != nil {
					lp.done <- cerr
					return
				}
				continue
			}
			lp.mu.Lock()
			lp.acked[seq] = true
			if r.GetReceipt().GetDuplicate() {
				lp.dupAcks++
			}
			lp.mu.Unlock()
			lp.progress <- seq
			seq++
		}
		lp.done <- nil
	}()
	return lp
}

// waitFor blocks until sequence seq is acknowledged.
func (lp *liveProducer) waitFor(seq int64) {
	for s := range lp.progress {
		if s >= seq {
			return
		}
	}
}

// finish waits for the producer and checks that every acknowledged message
// is in the topic (read through broker addr); it logs duplicates.
func (lp *liveProducer) finish(t *testing.T, addr, topic string, total int) {
	t.Helper()
	go func() {
		for range lp.progress {
		}
	}()
	if err := <-lp.done; err != nil {
		t.Fatal(err)
	}
	close(lp.progress)
	got := consume(t, dial(t, addr), topic, "check", total)
	seen := map[string]int{}
	for _, p := range got {
		seen[p]++
	}
	dups := 0
	for _, n := range seen {
		dups += n - 1
	}
	lp.mu.Lock()
	defer lp.mu.Unlock()
	for seq := range lp.acked {
		if seen[fmt.Sprintf("m%d", seq)] == 0 {
			t.Fatalf("acknowledged message m%d lost", seq)
		}
	}
	t.Logf("acked %d, received %d, duplicates in the log %d, resends answered by dedup %d, producer (re)connects %d",
		len(lp.acked), len(got), dups, lp.dupAcks, lp.reopens)
}

// TestFailoverWhileProducing kills the owner in the middle of a stream of
// sends. The producer reconnects (new lookup) and resends what was not
// acknowledged with the same sequence IDs; the new owner's deduplication
// answers resends of entries that were stored before the crash.
func TestFailoverWhileProducing(t *testing.T) {
	rc := regiontest.Start(t, regiontest.Options{Brokers: 2, Bookies: 3})
	addrs := rc.Addrs()
	topic := "public/default/live-failover"
	const total = 200
	lp := startLiveProducer(t, addrs, topic, total)
	owner := regiontest.LookupOwner(t, addrs[0], topic, func(string) bool { return true })
	lp.waitFor(60)
	oi := 0
	if owner == addrs[1] {
		oi = 1
	}
	rc.Kill(oi)
	lp.finish(t, addrs[1-oi], topic, total)
}

// TestBookieKilledWhileProducing kills a bookie of the ensemble mid-stream:
// the ledger client replaces it (or the topic reloads on a new ledger) and
// no acknowledged message is lost.
func TestBookieKilledWhileProducing(t *testing.T) {
	rc := regiontest.Start(t, regiontest.Options{Brokers: 1, Bookies: 4})
	addrs := rc.Addrs()
	topic := "public/default/bookie-failure"
	const total = 200
	lp := startLiveProducer(t, addrs, topic, total)
	lp.waitFor(60)
	// Kill a bookie of the current ledger's ensemble.
	_, adm := dialAdmin(t, addrs[0])
	st, err := adm.GetTopicInternalStats(context.Background(), &clientv1.GetTopicInternalStatsRequest{Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	cur := st.Ledgers[len(st.Ledgers)-1].LedgerId
	lcfg := ledger.DefaultConfig()
	lcfg.Store, lcfg.Placement = rc.Regional, mustPlacement(t)
	lc, err := ledger.NewClient(lcfg)
	if err != nil {
		t.Fatal(err)
	}
	defer lc.Close()
	md, err := lc.Metadata(context.Background(), cur)
	if err != nil {
		t.Fatal(err)
	}
	victim := md.Segments[len(md.Segments)-1].Ensemble[0].ID
	for i := range rc.Bookies.N() {
		if rc.Bookies.ID(i) == victim {
			rc.Bookies.Kill(i)
			t.Logf("killed %s of ledger %d's ensemble", victim, cur)
		}
	}
	lp.finish(t, addrs[0], topic, total)
}

func dialAdmin(t *testing.T, addr string) (clientv1.MeridianClient, clientv1.AdminClient) {
	t.Helper()
	c, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return clientv1.NewMeridianClient(c), clientv1.NewAdminClient(c)
}

func mustPlacement(t *testing.T) topology.Placement {
	cfg := topology.DefaultRackAwareConfig()
	cfg.MinRacksPerWriteQuorum = 1
	p, err := topology.NewRackAwarePlacement(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}
