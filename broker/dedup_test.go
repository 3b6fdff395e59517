package broker_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
	"github.com/meridianmq/meridian/internal/wire"
	"github.com/meridianmq/meridian/region/regiontest"
	"google.golang.org/protobuf/proto"
)

// rawSend opens producer name on the topic's owner (found through cli),
// sends one single-message batch with seq and closes the stream. It returns
// the ProducerOpened answer and the receipt.
func rawSend(ctx context.Context, cli clientv1.MeridianClient, topic, name string, seq int64) (*clientv1.ProducerOpened, *clientv1.SendReceipt, error) {
	return rawSendWithin(ctx, 60*time.Second, cli, topic, name, seq, []byte(name))
}

// rawSendWithin is rawSend with a chosen payload, all within timeout.
func rawSendWithin(ctx context.Context, timeout time.Duration, cli clientv1.MeridianClient, topic, name string, seq int64, payload []byte) (*clientv1.ProducerOpened, *clientv1.SendReceipt, error) {
	sctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	st, err := cli.Produce(sctx)
	if err != nil {
		return nil, nil, err
	}
	if err := st.Send(&clientv1.ProduceRequest{Kind: &clientv1.ProduceRequest_Open{Open: &clientv1.OpenProducer{Topic: topic, ProducerName: name}}}); err != nil {
		return nil, nil, err
	}
	r, err := st.Recv()
	if err != nil {
		return nil, nil, fmt.Errorf("open %s: %w", name, err)
	}
	opened := r.GetOpened()
	body, size, _ := wire.EncodeBatch(&clientv1.Batch{Messages: []*clientv1.SingleMessage{{Key: name, Payload: payload}}}, clientv1.CompressionType_COMPRESSION_TYPE_NONE)
	if err := st.Send(&clientv1.ProduceRequest{Kind: &clientv1.ProduceRequest_Send{Send: &clientv1.Send{SequenceId: seq, NumMessages: 1,
		UncompressedSize: size, Payload: body}}}); err != nil {
		return nil, nil, err
	}
	r, err = st.Recv()
	if err != nil {
		return nil, nil, fmt.Errorf("receipt of %s: %w", name, err)
	}
	_ = st.CloseSend()
	for {
		if _, err := st.Recv(); err != nil {
			break
		}
	}
	return opened, r.GetReceipt(), nil
}

// ownerClient returns a client connected to the topic's owner, once the
// owner is not at address dead.
func ownerClient(t *testing.T, rc *regiontest.Cluster, via int, topic, dead string) clientv1.MeridianClient {
	t.Helper()
	cli, _ := conn(t, rc.Addrs()[via])
	var addr string
	waitFor(t, "lookup of "+topic, func() bool {
		r, err := cli.Lookup(context.Background(), &clientv1.LookupRequest{Topic: topic})
		if err != nil {
			return false
		}
		addr = r.GetBrokerUrl()
		return addr != dead
	})
	oc, _ := conn(t, addr)
	return oc
}

// forEach runs fn for names p-0000..p-(n-1), 32 at a time, and fails the
// test on the first error.
func forEach(t *testing.T, n int, fn func(name string) error) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	sem := make(chan struct{}, 32)
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := fn(fmt.Sprintf("p-%04d", i)); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// TestDedupTracksEveryProducerAcrossMoves writes one message with each of
// 5000 producer names (more than the dedup snapshot holds), moves the topic
// (graceful unload, then a crash of the owner) and resends the last message
// of every producer: each resend must be dropped as a duplicate and answered
// with the ID the message was first stored under. Nothing acknowledged is
// lost and nothing is stored twice.
func TestDedupTracksEveryProducerAcrossMoves(t *testing.T) {
	const n = 5000
	rc := regiontest.Start(t, regiontest.Options{Brokers: 2, Bookies: 1})
	ctx := context.Background()
	topic := "public/default/dedup-5000"
	_, adm := conn(t, rc.Addrs()[0])
	if _, err := adm.CreateTopic(ctx, &clientv1.CreateTopicRequest{Topic: topic}); err != nil {
		t.Fatal(err)
	}
	// A subscription keeps every ledger from retention.
	if _, err := adm.CreateSubscription(ctx, &clientv1.CreateSubscriptionRequest{Topic: topic, Subscription: "check",
		InitialPosition: clientv1.InitialPosition_INITIAL_POSITION_EARLIEST}); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	stored := map[string]*clientv1.MessageId{}
	owner := ownerClient(t, rc, 0, topic, "")
	forEach(t, n, func(name string) error {
		_, r, err := rawSend(ctx, owner, topic, name, 0)
		if err != nil {
			return err
		}
		if r.GetError() != nil || r.GetDuplicate() || r.GetMessageId() == nil {
			return fmt.Errorf("first send of %s: %v", name, r)
		}
		mu.Lock()
		stored[name] = r.GetMessageId()
		mu.Unlock()
		return nil
	})

	resendAll := func(phase string, cli clientv1.MeridianClient) {
		t.Helper()
		var mu sync.Mutex
		accepted, noID := 0, 0
		forEach(t, n, func(name string) error {
			opened, r, err := rawSend(ctx, cli, topic, name, 0)
			if err != nil {
				return fmt.Errorf("%s: %w", phase, err)
			}
			if r.GetError() != nil {
				return fmt.Errorf("%s: resend of %s: %v", phase, name, r.GetError())
			}
			mu.Lock()
			defer mu.Unlock()
			if opened.GetLastSequenceId() != 0 {
				return fmt.Errorf("%s: producer %s opened with last sequence %d, want 0", phase, name, opened.GetLastSequenceId())
			}
			if !r.GetDuplicate() {
				accepted++
				return nil
			}
			if r.GetMessageId() == nil {
				noID++
			} else if !proto.Equal(r.GetMessageId(), stored[name]) {
				return fmt.Errorf("%s: duplicate of %s answered with id %v, first stored at %v", phase, name, r.GetMessageId(), stored[name])
			}
			return nil
		})
		if accepted > 0 || noID > 0 {
			t.Fatalf("%s: %d of %d resends stored again (duplicates), %d answered without their first ID", phase, accepted, n, noID)
		}
	}

	if _, err := adm.UnloadTopic(ctx, &clientv1.UnloadTopicRequest{Topic: topic}); err != nil {
		t.Fatal(err)
	}
	resendAll("after unload", ownerClient(t, rc, 0, topic, ""))

	// Crash the owner: the other broker recovers the ledgers.
	lr, err := func() (*clientv1.LookupResponse, error) {
		cli, _ := conn(t, rc.Addrs()[0])
		return cli.Lookup(ctx, &clientv1.LookupRequest{Topic: topic})
	}()
	if err != nil {
		t.Fatal(err)
	}
	killed := 0
	if lr.GetBrokerUrl() == rc.Addrs()[1] {
		killed = 1
	}
	rc.Kill(killed)
	resendAll("after owner crash", ownerClient(t, rc, 1-killed, topic, rc.Addrs()[killed]))

	// Every acknowledged message is stored exactly once.
	cli, adm2 := conn(t, rc.Addrs()[1-killed])
	st, err := adm2.GetTopicStats(ctx, &clientv1.GetTopicStatsRequest{Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	if st.GetEntries() != n {
		t.Fatalf("topic holds %d entries, want %d (one per producer)", st.GetEntries(), n)
	}
	c := subscribe(t, cli, topic, "check", clientv1.SubscriptionType_SUBSCRIPTION_TYPE_EXCLUSIVE)
	seen := map[string]int{}
	for len(seen) < n {
		if len(seen)%500 == 0 {
			if err := c.st.Send(&clientv1.ConsumeRequest{Kind: &clientv1.ConsumeRequest_Flow{Flow: &clientv1.Flow{Permits: 500}}}); err != nil {
				t.Fatal(err)
			}
		}
		_, payload := c.next()
		seen[payload]++
		if seen[payload] > 1 {
			t.Fatalf("%s stored twice", payload)
		}
	}
	for name := range stored {
		if seen[name] != 1 {
			t.Fatalf("acknowledged message of %s lost", name)
		}
	}
}
