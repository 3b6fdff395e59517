package broker_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/meridianmq/meridian/bookie/ledger"
	"github.com/meridianmq/meridian/broker"
	"github.com/meridianmq/meridian/internal/faultfs"
	"github.com/meridianmq/meridian/region/regiontest"
)

// TestProducerBackPressureInBytes: a producer that sends 4 MiB messages
// as fast as it can, never reading a receipt, while the bookie's fsyncs
// are stalled, is held by the connection's byte budget: the broker reads
// only what fits (before: every send was read and queued, 30 of them,
// 120 MiB, limited by count alone). Once the disk recovers every send is
// stored and acknowledged: none lost.
func TestProducerBackPressureInBytes(t *testing.T) {
	const limit = 10 << 20 // two messages
	// The ledger's add timeout is well above the stall, so that a loaded
	// machine does not turn the stall into a failed add.
	rc := regiontest.Start(t, regiontest.Options{Brokers: 1, Bookies: 1,
		Broker: func(_ int, c *broker.Config) {
			c.MaxInflightBytesPerConnection = limit
			c.MaxPendingSendBytes = 2 * limit
			c.MaxInflightProduceBytes = 4 * limit
		},
		Ledger: func(_ int, c *ledger.Config) { c.AddTimeout = time.Minute }})
	cli, _ := conn(t, rc.Addrs()[0])
	topic := "public/default/backpressure"
	p, _ := openProducer(t, cli, topic, "p")
	p.sendOK(0) // the topic and its ledger are open

	// One fsync stalls for 3 s: everything sent meanwhile waits for it.
	rc.Bookies.FaultFS(0).Inject(faultfs.Fault{Op: faultfs.OpSync, Delay: 3 * time.Second, Count: 1})
	payload := randomPayload(4 << 20)
	const sends = 30
	var written atomic.Int64
	done := make(chan error, 1)
	go func() {
		for seq := int64(1); seq <= sends; seq++ {
			if err := p.st.Send(sendRequest(seq, payload)); err != nil {
				done <- err
				return
			}
			written.Add(1)
		}
		done <- nil
	}()
	// Sample while the fsync is stalled.
	var peak int64
	for end := time.Now().Add(2500 * time.Millisecond); time.Now().Before(end) && written.Load() < sends; {
		time.Sleep(50 * time.Millisecond)
		peak = max(peak, broker.InflightProduceBytesForTesting(rc.Broker(0)))
	}
	n := written.Load()
	t.Logf("while stalled: %d of %d sends written by the client, broker budget peak %d bytes", n, sends, peak)
	if peak > limit+(1<<20) {
		t.Fatalf("broker held %d bytes of sends, limit %d", peak, limit)
	}
	// Two in the budget, one waiting for it, and what HTTP/2 windows
	// buffer (up to 16 MiB with BDP estimation): far below 30.
	if n >= sends {
		t.Fatalf("all %d sends of 4 MiB were read while the disk was stalled: no back-pressure", sends)
	}
	if err := <-done; err != nil {
		for {
			r, rerr := p.st.Recv()
			if rerr != nil {
				t.Fatalf("send: %v (stream: %v)", err, rerr)
			}
			t.Logf("receipt %v", r.GetReceipt())
		}
	}
	dups := 0
	for seq := int64(1); seq <= sends; seq++ {
		r, err := p.st.Recv()
		if err != nil {
			t.Fatalf("receipt %d: %v", seq, err)
		}
		rc := r.GetReceipt()
		if rc.GetError() != nil {
			t.Fatalf("send %d refused: %v", rc.GetSequenceId(), rc.GetError())
		}
		if rc.GetMessageId() == nil {
			dups++
		}
	}
	t.Logf("every one of %d sends acknowledged, %d duplicates", sends, dups)
	if got := broker.InflightProduceBytesForTesting(rc.Broker(0)); got != 0 {
		t.Fatalf("budget holds %d bytes after every receipt", got)
	}
}
