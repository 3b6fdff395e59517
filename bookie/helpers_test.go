package bookie_test

import (
	"context"
	"testing"
	"time"

	bookiev1 "github.com/meridianmq/meridian/api/bookie/v1"
	"github.com/meridianmq/meridian/bookie"
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
