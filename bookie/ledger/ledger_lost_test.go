package ledger_test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/meridianmq/meridian/bookie/ledger"
)

// TestReadPastLostEntry loses one entry on every replica (its bytes are
// damaged on every bookie) and reads across it: the entries before it
// must come back with the error (never held back by it), and the entries
// after it stay readable. Both read paths are covered: streamed ranges
// (E = Qw) and entry-by-entry reads (E > Qw).
func TestReadPastLostEntry(t *testing.T) {
	for _, q := range []ledger.CreateOptions{
		{Ensemble: 3, WriteQuorum: 3, AckQuorum: 2},
		{Ensemble: 3, WriteQuorum: 2, AckQuorum: 2},
	} {
		t.Run(fmt.Sprintf("E%dQw%dQa%d", q.Ensemble, q.WriteQuorum, q.AckQuorum), func(t *testing.T) {
			e := newEnv(t, 3)
			c := e.client(nil)
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			w, err := c.Create(ctx, q)
			if err != nil {
				t.Fatal(err)
			}
			const n, lost = 40, 17
			payloads := make([][]byte, n)
			for i := range payloads {
				payloads[i] = make([]byte, 256)
				_, _ = rand.Read(payloads[i])
				if _, err := w.Append(ctx, payloads[i]); err != nil {
					t.Fatal(err)
				}
			}
			if err := w.Close(ctx); err != nil {
				t.Fatal(err)
			}
			copies, err := e.bk.LoseEntry(ctx, w.ID(), lost, payloads[lost])
			if err != nil {
				t.Fatal(err)
			}
			if copies < q.WriteQuorum {
				t.Fatalf("damaged %d copies of entry %d, want >= %d", copies, lost, q.WriteQuorum)
			}
			r, err := c.Open(ctx, w.ID())
			if err != nil {
				t.Fatal(err)
			}
			got, err := r.Read(ctx, 0, n-1)
			if !errors.Is(err, ledger.ErrEntryCorrupt) {
				t.Fatalf("read across the lost entry: %v, want ErrEntryCorrupt", err)
			}
			if len(got) != lost {
				t.Fatalf("read across the lost entry returned %d entries, want the %d before it", len(got), lost)
			}
			for i, en := range got {
				if en.EntryID != int64(i) || string(en.Data) != string(payloads[i]) {
					t.Fatalf("entry %d came back as %d or with the wrong payload", i, en.EntryID)
				}
			}
			rest, err := r.Read(ctx, lost+1, n-1)
			if err != nil || len(rest) != n-lost-1 {
				t.Fatalf("read after the lost entry: %d entries, %v", len(rest), err)
			}
			for _, en := range rest {
				if string(en.Data) != string(payloads[en.EntryID]) {
					t.Fatalf("entry %d: wrong payload", en.EntryID)
				}
			}
		})
	}
}
