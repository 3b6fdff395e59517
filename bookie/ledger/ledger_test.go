package ledger_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/meridianmq/meridian/bookie/ledger"
)

func TestAppendReadRoundTrip(t *testing.T) {
	e := newEnv(t, 3)
	c := e.client(nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	for _, q := range []ledger.CreateOptions{
		{Ensemble: 3, WriteQuorum: 2, AckQuorum: 2, Properties: map[string]string{"topic": "t1"}},
		{Ensemble: 1, WriteQuorum: 1, AckQuorum: 1},
	} {
		t.Run(fmt.Sprintf("E%dQw%dQa%d", q.Ensemble, q.WriteQuorum, q.AckQuorum), func(t *testing.T) {
			w, err := c.Create(ctx, q)
			if err != nil {
				t.Fatal(err)
			}
			const n = 500
			results := make(chan int64, n)
			for i := range n {
				w.AppendAsync([]byte(fmt.Sprintf("entry-%d", i)), func(id int64, err error) {
					if err != nil {
						t.Errorf("add %d: %v", i, err)
					}
					results <- id
				})
			}
			for i := range n {
				if id := <-results; id != int64(i) {
					t.Fatalf("callback %d reported entry %d: not in entry order", i, id)
				}
			}
			id, err := w.Append(ctx, []byte("last"))
			if err != nil || id != n {
				t.Fatalf("Append = %d, %v; want %d", id, err, n)
			}
			if got := w.LastAddConfirmed(); got != n {
				t.Fatalf("LastAddConfirmed = %d, want %d", got, n)
			}

			// An open ledger is readable up to the piggybacked LAC.
			r, err := c.Open(ctx, w.ID())
			if err != nil {
				t.Fatal(err)
			}
			if r.IsClosed() {
				t.Fatal("open ledger reported closed")
			}
			if lac := r.LastAddConfirmed(); lac < n-1 {
				t.Fatalf("reader LAC %d of an open ledger, want >= %d", lac, n-1)
			}
			if err := w.Close(ctx); err != nil {
				t.Fatal(err)
			}
			if _, err := w.Append(ctx, []byte("x")); !errors.Is(err, ledger.ErrLedgerClosed) {
				t.Fatalf("append after close: %v, want ErrLedgerClosed", err)
			}
			lac, err := r.ReadLastAddConfirmed(ctx)
			if err != nil || lac != n || !r.IsClosed() {
				t.Fatalf("ReadLastAddConfirmed after close = %d, %v (closed %v); want %d", lac, err, r.IsClosed(), n)
			}
			entries, err := r.Read(ctx, 0, n)
			if err != nil {
				t.Fatal(err)
			}
			for i, en := range entries[:n] {
				if want := fmt.Sprintf("entry-%d", i); string(en.Data) != want || en.EntryID != int64(i) || en.LedgerID != w.ID() {
					t.Fatalf("entry %d = %+v, want %q", i, en, want)
				}
			}
			if !bytes.Equal(entries[n].Data, []byte("last")) {
				t.Fatalf("last entry %q", entries[n].Data)
			}
			if _, err := r.Read(ctx, n, n+1); !errors.Is(err, ledger.ErrNoSuchEntry) {
				t.Fatalf("read beyond the end: %v, want ErrNoSuchEntry", err)
			}
			md, err := c.Metadata(ctx, w.ID())
			if err != nil {
				t.Fatal(err)
			}
			if md.State != ledger.StateClosed || md.LastEntry != n || md.Length <= 0 || md.Properties["topic"] != q.Properties["topic"] {
				t.Fatalf("metadata after close: %+v", md)
			}

			if err := c.Delete(ctx, w.ID()); err != nil {
				t.Fatal(err)
			}
			if _, err := c.Open(ctx, w.ID()); !errors.Is(err, ledger.ErrNoSuchLedger) {
				t.Fatalf("open after delete: %v, want ErrNoSuchLedger", err)
			}
		})
	}
}

func TestIDsAreUniqueAcrossClients(t *testing.T) {
	e := newEnv(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c1 := e.client(func(c *ledger.Config) { c.IDBatch = 3 })
	c2 := e.client(func(c *ledger.Config) { c.IDBatch = 3 })
	seen := map[int64]bool{}
	for i := range 10 {
		for _, c := range []*ledger.Client{c1, c2} {
			w, err := c.Create(ctx, ledger.CreateOptions{Ensemble: 1, WriteQuorum: 1, AckQuorum: 1})
			if err != nil {
				t.Fatal(err)
			}
			if w.ID() < 0 || seen[w.ID()] {
				t.Fatalf("ledger ID %d handed out twice (round %d)", w.ID(), i)
			}
			seen[w.ID()] = true
			if err := w.Close(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	ids, err := c1.Ledgers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(ids) != len(seen) {
		t.Fatalf("Ledgers listed %d, created %d", len(ids), len(seen))
	}
	for i, id := range ids {
		if !seen[id] || (i > 0 && ids[i-1] >= id) {
			t.Fatalf("Ledgers = %v: unknown or out of order", ids)
		}
	}
}

func TestBadInput(t *testing.T) {
	e := newEnv(t, 3)
	c := e.client(nil)
	ctx := context.Background()
	for _, tc := range []struct {
		opts ledger.CreateOptions
		want string
	}{
		{ledger.CreateOptions{Ensemble: 3, WriteQuorum: 3, AckQuorum: 0}, "AckQuorum"},
		{ledger.CreateOptions{Ensemble: 3, WriteQuorum: 1, AckQuorum: 2}, "WriteQuorum"},
		{ledger.CreateOptions{Ensemble: 2, WriteQuorum: 3, AckQuorum: 2}, "Ensemble"},
		{ledger.CreateOptions{Ensemble: 65, WriteQuorum: 3, AckQuorum: 2}, "Ensemble"},
	} {
		_, err := c.Create(ctx, tc.opts)
		if !errors.Is(err, ledger.ErrInvalidArgument) || !bytes.Contains([]byte(err.Error()), []byte(tc.want)) {
			t.Errorf("Create(%+v) = %v, want ErrInvalidArgument naming %s", tc.opts, err, tc.want)
		}
	}
	if _, err := c.Create(ctx, ledger.CreateOptions{Ensemble: 4, WriteQuorum: 3, AckQuorum: 2}); !errors.Is(err, ledger.ErrNotEnoughBookies) {
		t.Errorf("E=4 on 3 bookies: %v, want ErrNotEnoughBookies", err)
	}
	w, err := c.Create(ctx, ledger.CreateOptions{Ensemble: 3, WriteQuorum: 3, AckQuorum: 2})
	if err != nil {
		t.Fatal(err)
	}
	big := make([]byte, ledger.DefaultConfig().MaxEntryBytes+1)
	if _, err := w.Append(ctx, big); !errors.Is(err, ledger.ErrInvalidArgument) {
		t.Errorf("oversize append: %v, want ErrInvalidArgument", err)
	}
	if w.LastAddConfirmed() != -1 {
		t.Errorf("rejected append changed LAC to %d", w.LastAddConfirmed())
	}
	if _, err := c.Open(ctx, 1<<40); !errors.Is(err, ledger.ErrNoSuchLedger) {
		t.Errorf("open unknown: %v, want ErrNoSuchLedger", err)
	}
	cfg := ledger.DefaultConfig()
	cfg.Store, cfg.Placement = e.store, nil
	if _, err := ledger.NewClient(cfg); !errors.Is(err, ledger.ErrInvalidArgument) {
		t.Errorf("NewClient without placement: %v", err)
	}
}

// TestClientCloseUnderWriter closes the client while a writer is adding:
// pending adds fail with ErrLedgerClosed and no ensemble change is
// recorded (the bookies did nothing wrong).
func TestClientCloseUnderWriter(t *testing.T) {
	e := newEnv(t, 4)
	c := e.client(nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	w, err := c.Create(ctx, ledger.CreateOptions{Ensemble: 3, WriteQuorum: 3, AckQuorum: 2})
	if err != nil {
		t.Fatal(err)
	}
	a := newAckLog()
	stop := make(chan struct{})
	done := appender(w, "w", a, stop, 100)
	waitFor(t, 30*time.Second, "100 acks", func() bool { return a.count() >= 100 })
	c.Close()
	<-done
	close(stop)
	for _, err := range a.errs {
		if !errors.Is(err, ledger.ErrLedgerClosed) {
			t.Fatalf("add failed with %v, want ErrLedgerClosed", err)
		}
	}
	if _, err := c.Create(ctx, ledger.CreateOptions{Ensemble: 1, WriteQuorum: 1, AckQuorum: 1}); !errors.Is(err, ledger.ErrLedgerClosed) {
		t.Fatalf("Create on a closed client: %v", err)
	}
	c2 := e.client(nil)
	md, err := c2.Metadata(ctx, w.ID())
	if err != nil {
		t.Fatal(err)
	}
	if len(md.Segments) != 1 {
		t.Fatalf("closing the client caused ensemble changes: %+v", md.Segments)
	}
	r, err := c2.OpenRecover(ctx, w.ID())
	if err != nil {
		t.Fatal(err)
	}
	verify(t, r, a)
}
