package bookie_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"testing"

	bookiev1 "github.com/meridianmq/meridian/api/bookie/v1"
	"github.com/meridianmq/meridian/bookie"
	"github.com/meridianmq/meridian/bookie/bookietest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

func TestAddReadRoundTrip(t *testing.T) {
	c := bookietest.StartCluster(t, 1)
	ctx := ctxT(t)
	cl := c.Client(0)
	for e := int64(0); e < 50; e++ {
		if err := add(ctx, cl, 7, e, payloadFor(7, e, int(e*37))); err != nil {
			t.Fatalf("add %d: %v", e, err)
		}
	}
	for e := int64(0); e < 50; e++ {
		got, err := read(ctx, cl, 7, e)
		if err != nil {
			t.Fatalf("read %d: %v", e, err)
		}
		if !bytes.Equal(got, payloadFor(7, e, int(e*37))) {
			t.Fatalf("entry %d: payload mismatch", e)
		}
	}
	// -1 reads the last entry.
	r, err := cl.ReadEntry(ctx, &bookiev1.ReadEntryRequest{LedgerId: 7, EntryId: -1})
	if err != nil || r.EntryId != 49 || r.LastAddConfirmed != 48 {
		t.Fatalf("read last: %v %+v", err, r)
	}
	lac, err := cl.ReadLastAddConfirmed(ctx, &bookiev1.ReadLastAddConfirmedRequest{LedgerId: 7})
	if err != nil || lac.LastAddConfirmed != 48 || lac.LastEntryId != 49 || lac.Fenced {
		t.Fatalf("lac: %v %+v", err, lac)
	}
	// Range read with a byte limit: stops early but sends at least one entry.
	st, err := cl.ReadRange(ctx, &bookiev1.ReadRangeRequest{LedgerId: 7, FirstEntryId: 10, LastEntryId: 49})
	if err != nil {
		t.Fatal(err)
	}
	next := int64(10)
	for {
		m, err := st.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if m.EntryId != next || !bytes.Equal(m.Payload, payloadFor(7, next, int(next*37))) {
			t.Fatalf("range: got entry %d want %d", m.EntryId, next)
		}
		next++
	}
	if next != 50 {
		t.Fatalf("range ended at %d", next)
	}
	st, _ = cl.ReadRange(ctx, &bookiev1.ReadRangeRequest{LedgerId: 7, FirstEntryId: 10, LastEntryId: 49, MaxBytes: 1})
	n := 0
	for {
		_, err := st.Recv()
		if err != nil {
			break
		}
		n++
	}
	if n != 1 {
		t.Fatalf("range with max_bytes=1 sent %d entries, want 1", n)
	}
	// Missing entry vs missing ledger.
	if _, err := read(ctx, cl, 7, 50); !errors.Is(err, bookie.ErrNoSuchEntry) {
		t.Fatalf("missing entry: %v", err)
	}
	if _, err := read(ctx, cl, 8, 0); !errors.Is(err, bookie.ErrNoSuchLedger) {
		t.Fatalf("missing ledger: %v", err)
	}
}

func TestBadInputRejected(t *testing.T) {
	c := bookietest.StartCluster(t, 1)
	ctx := ctxT(t)
	cl := c.Client(0)
	max := c.Server(0).Config().MaxEntryBytes
	cases := []struct {
		name string
		req  *bookiev1.AddEntryRequest
		want string
	}{
		{"negative ledger", &bookiev1.AddEntryRequest{LedgerId: -1, EntryId: 0}, "ledger_id"},
		{"negative entry", &bookiev1.AddEntryRequest{LedgerId: 3, EntryId: -5}, "entry_id"},
		{"bad lac", &bookiev1.AddEntryRequest{LedgerId: 3, EntryId: 0, LastAddConfirmed: -2}, "last_add_confirmed"},
		{"oversize", &bookiev1.AddEntryRequest{LedgerId: 3, EntryId: 0, Payload: make([]byte, max+1)}, "MaxEntryBytes"},
	}
	for _, tc := range cases {
		_, err := cl.AddEntry(ctx, tc.req)
		err = bookie.FromStatus(err)
		if !errors.Is(err, bookie.ErrInvalidArgument) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want ErrInvalidArgument naming %s", tc.name, err, tc.want)
		}
	}
	if _, err := cl.ReadLastAddConfirmed(ctx, &bookiev1.ReadLastAddConfirmedRequest{LedgerId: 3}); !errors.Is(bookie.FromStatus(err), bookie.ErrNoSuchLedger) {
		t.Fatalf("bad adds changed state: %v", err)
	}
	// Exactly the limit is accepted.
	if err := add(ctx, cl, 3, 0, make([]byte, max)); err != nil {
		t.Fatalf("add of MaxEntryBytes: %v", err)
	}
	if _, err := cl.ReadEntry(ctx, &bookiev1.ReadEntryRequest{LedgerId: 3, EntryId: -2}); !errors.Is(bookie.FromStatus(err), bookie.ErrInvalidArgument) {
		t.Fatalf("read entry -2: %v", err)
	}
	if _, err := cl.ReadRange(ctx, &bookiev1.ReadRangeRequest{LedgerId: 3, FirstEntryId: 5, LastEntryId: 1}); err == nil {
		// The status arrives on the first Recv for server streams.
		st, _ := cl.ReadRange(ctx, &bookiev1.ReadRangeRequest{LedgerId: 3, FirstEntryId: 5, LastEntryId: 1})
		if _, err := st.Recv(); !errors.Is(bookie.FromStatus(err), bookie.ErrInvalidArgument) {
			t.Fatalf("range last<first: %v", err)
		}
	}
}

func TestConfigValidateNamesField(t *testing.T) {
	cfg := bookie.DefaultConfig()
	cfg.ID = "b"
	cfg.JournalDir = t.TempDir()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	bad := cfg
	bad.DiskUsageThreshold = 1.5
	if err := bad.Validate(); !errors.Is(err, bookie.ErrInvalidConfig) || !strings.Contains(err.Error(), "DiskUsageThreshold") {
		t.Fatalf("got %v", err)
	}
	bad = cfg
	bad.MaxEntryBytes = 0
	if _, err := bookie.NewServer(bad); err == nil || !strings.Contains(err.Error(), "MaxEntryBytes") {
		t.Fatalf("got %v", err)
	}
}

// TestInProcessListener: with InProcess the same service answers over the
// in-memory listener (what the standalone's ledger client dials); without
// it DialInProcess fails.
func TestInProcessListener(t *testing.T) {
	c := bookietest.StartCluster(t, 2, bookietest.WithConfig(func(i int, cfg *bookie.Config) { cfg.InProcess = i == 0 }))
	ctx := ctxT(t)
	srv := c.Server(0)
	conn, err := grpc.NewClient("passthrough:///in-process", append([]grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return srv.DialInProcess(ctx) })},
		bookie.WithExpectedIdentity(bookie.FixedIdentity(srv.ID(), srv.InstanceID()))...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	cl := bookiev1.NewBookieClient(conn)
	for e := int64(0); e < 20; e++ {
		if err := add(ctx, cl, 3, e, payloadFor(3, e, 1000)); err != nil {
			t.Fatalf("add %d in process: %v", e, err)
		}
	}
	// Written in process, read back over the socket.
	for e := int64(0); e < 20; e++ {
		got, err := read(ctx, c.Client(0), 3, e)
		if err != nil || !bytes.Equal(got, payloadFor(3, e, 1000)) {
			t.Fatalf("entry %d over TCP: %v", e, err)
		}
	}
	if _, err := c.Server(1).DialInProcess(ctx); err == nil {
		t.Fatal("DialInProcess without InProcess succeeded")
	}
}
