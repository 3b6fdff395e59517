package bookie_test

import (
	"bytes"
	"testing"
	"time"

	bookiev1 "github.com/meridianmq/meridian/api/bookie/v1"
	"github.com/meridianmq/meridian/bookie"
	"github.com/meridianmq/meridian/bookie/bookietest"
	"github.com/meridianmq/meridian/internal/netguard/netguardtest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// TestServerLimitsPerIP: the bookie's gRPC and HTTP listeners each
// refuse connection N+1 from one IP and accept again after one closes.
func TestServerLimitsPerIP(t *testing.T) {
	c := bookietest.StartCluster(t, 1, bookietest.WithConfig(func(_ int, cfg *bookie.Config) { cfg.MaxConnectionsPerIP = 2 }))
	netguardtest.CheckPerIPLimit(t, c.Addr(0), 2, nil)
	netguardtest.CheckPerIPLimit(t, c.Server(0).HTTPAddr(), 2, netguardtest.HTTPProbe)
	if v := metricValue(t, c.Server(0), "meridian_server_connections_refused_total"); v < 2 {
		t.Fatalf("meridian_server_connections_refused_total = %v, want >= 2", v)
	}
}

// TestServerLimitsStreamsTimeoutsAndSize: the gRPC server announces the
// stream and header caps, refuses a message over its size, and the HTTP
// server cuts a slow body and an idle keep-alive connection.
func TestServerLimitsStreamsTimeoutsAndSize(t *testing.T) {
	c := bookietest.StartCluster(t, 1, bookietest.WithConfig(func(_ int, cfg *bookie.Config) {
		cfg.MaxStreamsPerConnection = 7
		cfg.HTTPReadTimeout = 200 * time.Millisecond
		cfg.HTTPIdleTimeout = 200 * time.Millisecond
	}))
	set := netguardtest.GRPCSettings(t, c.Addr(0))
	if set[netguardtest.SettingMaxConcurrentStreams] != 7 || set[netguardtest.SettingMaxHeaderListSize] == 0 {
		t.Fatalf("bookie SETTINGS %v: want max_concurrent_streams 7 and a max_header_list_size", set)
	}
	netguardtest.CheckSlowBodyCut(t, c.Server(0).HTTPAddr(), "/healthz")
	netguardtest.CheckIdleCut(t, c.Server(0).HTTPAddr())
	big := bytes.Repeat([]byte{1}, 6<<20) // over MaxEntryBytes (5 MiB) plus framing
	// Through the identity check of the ledger clients: gRPC's own
	// refusal carries no identity headers and must stay ResourceExhausted
	// (it used to become FailedPrecondition "wrong bookie").
	cc, err := grpc.NewClient(c.Addr(0), append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(64 << 20))},
		bookie.WithExpectedIdentity(bookie.FixedIdentity(c.Server(0).ID(), c.Server(0).InstanceID()))...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	_, err = bookiev1.NewBookieClient(cc).AddEntry(ctxT(t), &bookiev1.AddEntryRequest{LedgerId: 1, EntryId: 0, Payload: big})
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("6 MiB add: %v, want ResourceExhausted", err)
	}
}

func TestConfigValidateLimits(t *testing.T) {
	cfg := bookie.DefaultConfig()
	cfg.ID, cfg.JournalDir = "b", t.TempDir()
	cfg.MaxStreamsPerConnection = 0
	if err := cfg.Validate(); err == nil || !bytes.Contains([]byte(err.Error()), []byte("max_streams_per_connection")) {
		t.Fatalf("Validate with 0 streams: %v, want an error naming max_streams_per_connection", err)
	}
}
