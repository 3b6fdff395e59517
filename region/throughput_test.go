package region

import (
	"context"
	"os"
	"testing"
	"time"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
	"github.com/meridianmq/meridian/internal/wire"
)

// TestStandaloneThroughput pipelines sends to standalone and reads them
// back. It runs only with MERIDIAN_THROUGHPUT=1 (it is a measurement).
func TestStandaloneThroughput(t *testing.T) {
	if os.Getenv("MERIDIAN_THROUGHPUT") == "" {
		t.Skip("set MERIDIAN_THROUGHPUT=1")
	}
	sa := startSA(t, t.TempDir())
	defer sa.Close()
	cli := dial(t, sa.GRPCAddr())
	const n, size = 20000, 1024
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	st, err := cli.Produce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	st.Send(&clientv1.ProduceRequest{Kind: &clientv1.ProduceRequest_Open{Open: &clientv1.OpenProducer{Topic: "public/default/tp"}}})
	if _, err := st.Recv(); err != nil {
		t.Fatal(err)
	}
	payload, usize, _ := wire.EncodeBatch(&clientv1.Batch{Messages: []*clientv1.SingleMessage{{Payload: make([]byte, size)}}}, clientv1.CompressionType_COMPRESSION_TYPE_NONE)
	start := time.Now()
	errs := make(chan error, 1)
	go func() {
		for i := range n {
			if err := st.Send(&clientv1.ProduceRequest{Kind: &clientv1.ProduceRequest_Send{Send: &clientv1.Send{SequenceId: int64(i), NumMessages: 1, UncompressedSize: usize, Payload: payload}}}); err != nil {
				errs <- err
				return
			}
		}
		errs <- nil
	}()
	for range n {
		r, err := st.Recv()
		if err != nil || r.GetReceipt().GetError() != nil {
			t.Fatalf("%v %v", r, err)
		}
	}
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
	el := time.Since(start)
	t.Logf("produce: %d entries of %d B in %v = %.0f entries/s, %.1f MB/s", n, size, el, n/el.Seconds(), float64(n*size)/el.Seconds()/1e6)
	start = time.Now()
	cs, _ := cli.Consume(ctx)
	cs.Send(&clientv1.ConsumeRequest{Kind: &clientv1.ConsumeRequest_Subscribe{Subscribe: &clientv1.Subscribe{Topic: "public/default/tp", Subscription: "s", InitialPosition: clientv1.InitialPosition_INITIAL_POSITION_EARLIEST}}})
	cs.Send(&clientv1.ConsumeRequest{Kind: &clientv1.ConsumeRequest_Flow{Flow: &clientv1.Flow{Permits: 5000}}})
	got := 0
	for got < n {
		r, err := cs.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if m := r.GetMessage(); m != nil {
			got++
			cs.Send(&clientv1.ConsumeRequest{Kind: &clientv1.ConsumeRequest_Ack{Ack: &clientv1.Ack{MessageIds: []*clientv1.MessageId{m.MessageId}}}})
			if got%2500 == 0 {
				cs.Send(&clientv1.ConsumeRequest{Kind: &clientv1.ConsumeRequest_Flow{Flow: &clientv1.Flow{Permits: 2500}}})
			}
		}
	}
	el = time.Since(start)
	t.Logf("consume: %d entries in %v = %.0f entries/s", n, el, n/el.Seconds())
}
