package bookie_test

import (
	"context"
	"testing"
	"time"

	bookiev1 "github.com/meridianmq/meridian/api/bookie/v1"
	"github.com/meridianmq/meridian/bookie"
	"google.golang.org/grpc/codes"
)

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func payloadFor(ledger, entry int64, size int) []byte {
	p := make([]byte, size)
	for i := range p {
		p[i] = byte(int64(i)*31 + ledger*7 + entry*13)
	}
	return p
}

func add(ctx context.Context, c bookiev1.BookieClient, ledger, entry int64, payload []byte) error {
	_, err := c.AddEntry(ctx, &bookiev1.AddEntryRequest{LedgerId: ledger, EntryId: entry, Payload: payload, LastAddConfirmed: entry - 1})
	return bookie.FromStatus(err)
}

func read(ctx context.Context, c bookiev1.BookieClient, ledger, entry int64) ([]byte, error) {
	r, err := c.ReadEntry(ctx, &bookiev1.ReadEntryRequest{LedgerId: ledger, EntryId: entry})
	if err != nil {
		return nil, bookie.FromStatus(err)
	}
	return r.Payload, nil
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// metricValue sums the samples of a counter or gauge family.
func metricValue(t testing.TB, srv *bookie.Server, name string) float64 {
	t.Helper()
	mfs, err := srv.Gatherer().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		var v float64
		for _, m := range mf.GetMetric() {
			switch {
			case m.Counter != nil:
				v += m.Counter.GetValue()
			case m.Gauge != nil:
				v += m.Gauge.GetValue()
			case m.Histogram != nil:
				v += float64(m.Histogram.GetSampleCount())
			}
		}
		return v
	}
	t.Fatalf("metric %s not found", name)
	return 0
}

// streamAdds sends entries [from, to) of ledger on one AddEntries stream
// with up to window in flight; it returns the acked entry ids and the
// errors of the others.
func streamAdds(ctx context.Context, c bookiev1.BookieClient, ledger, from, to int64, size int, window int) (acked []int64, failed map[int64]error, err error) {
	st, err := c.AddEntries(ctx)
	if err != nil {
		return nil, nil, err
	}
	failed = map[int64]error{}
	sem := make(chan struct{}, window)
	sendErr := make(chan error, 1)
	go func() {
		for e := from; e < to; e++ {
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				sendErr <- ctx.Err()
				return
			}
			if err := st.Send(&bookiev1.AddEntriesRequest{Entries: []*bookiev1.AddEntryRequest{{LedgerId: ledger, EntryId: e, Payload: payloadFor(ledger, e, size), LastAddConfirmed: e - 1}}}); err != nil {
				sendErr <- err
				return
			}
		}
		sendErr <- st.CloseSend()
	}()
	for n := from; n < to; {
		m, err := st.Recv()
		if err != nil {
			return acked, failed, err
		}
		for _, r := range m.Results {
			n++
			<-sem
			if e := bookie.FromCode(codes.Code(r.Code), r.Message); e != nil {
				failed[r.EntryId] = e
			} else {
				acked = append(acked, r.EntryId)
			}
		}
	}
	return acked, failed, <-sendErr
}
