package netguard_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meridianmq/meridian/internal/netguard"
	"github.com/meridianmq/meridian/internal/netguard/netguardtest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// streamGauge counts the server's open streams and the most seen.
type streamGauge struct {
	mu        sync.Mutex
	open, max int
}

func (g *streamGauge) interceptor(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	g.mu.Lock()
	g.open++
	g.max = max(g.max, g.open)
	g.mu.Unlock()
	defer func() { g.mu.Lock(); g.open--; g.mu.Unlock() }()
	return h(srv, ss)
}

func (g *streamGauge) get() (open, most int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.open, g.max
}

func startGRPC(t *testing.T, l netguard.Limits, maxRecv int, g *streamGauge) string {
	t.Helper()
	lis := listen(t)
	srv := grpc.NewServer(append(l.GRPCServerOptions(maxRecv, netguard.DefaultKeepalive()), grpc.StreamInterceptor(g.interceptor))...)
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return lis.Addr().String()
}

// TestGRPCStreamsPerConnectionCapped: a client opening more streams than
// max_streams_per_connection on one connection waits; the server never
// holds more than the cap.
func TestGRPCStreamsPerConnectionCapped(t *testing.T) {
	l := netguard.DefaultLimits(2)
	g := &streamGauge{}
	addr := startGRPC(t, l, 4<<20, g)
	if got := netguardtest.GRPCSettings(t, addr)[netguardtest.SettingMaxConcurrentStreams]; got != 2 {
		t.Fatalf("SETTINGS_MAX_CONCURRENT_STREAMS = %d, want 2", got)
	}
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	hc := healthpb.NewHealthClient(cc)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var cancels []context.CancelFunc
	for range 2 {
		sctx, scancel := context.WithCancel(ctx)
		cancels = append(cancels, scancel)
		st, err := hc.Watch(sctx, &healthpb.HealthCheckRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.Recv(); err != nil {
			t.Fatal(err)
		}
	}
	// Ten more streams: each waits for a slot.
	var wg sync.WaitGroup
	for range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sctx, scancel := context.WithTimeout(ctx, 300*time.Millisecond)
			defer scancel()
			st, err := hc.Watch(sctx, &healthpb.HealthCheckRequest{})
			if err == nil {
				_, err = st.Recv()
			}
			if status.Code(err) != codes.DeadlineExceeded {
				t.Errorf("stream beyond the cap: %v, want DeadlineExceeded (waiting for a slot)", err)
			}
		}()
	}
	wg.Wait()
	if _, most := g.get(); most != 2 {
		t.Fatalf("server held %d streams at once on one connection, cap 2", most)
	}
	// A slot freed is used.
	cancels[0]()
	st, err := hc.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err == nil {
		_, err = st.Recv()
	}
	if err != nil {
		t.Fatalf("stream after one closed: %v", err)
	}
	if _, most := g.get(); most != 2 {
		t.Fatalf("server held %d streams at once, cap 2", most)
	}
	cancels[1]()
}

// TestGRPCMaxRecvMsgSize: a message over the limit is ResourceExhausted.
func TestGRPCMaxRecvMsgSize(t *testing.T) {
	addr := startGRPC(t, netguard.DefaultLimits(10), 1024, &streamGauge{})
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	_, err = healthpb.NewHealthClient(cc).Check(context.Background(), &healthpb.HealthCheckRequest{Service: strings.Repeat("x", 2048)})
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("2 KiB request to a 1 KiB server: %v, want ResourceExhausted", err)
	}
}

// TestGRPCHeaderListCapped: the header limit is announced, and a call
// with headers over it fails instead of being buffered.
func TestGRPCHeaderListCapped(t *testing.T) {
	l := netguard.DefaultLimits(10)
	l.MaxHeaderListBytes = 8 << 10
	addr := startGRPC(t, l, 4<<20, &streamGauge{})
	if got := netguardtest.GRPCSettings(t, addr)[netguardtest.SettingMaxHeaderListSize]; got != 8<<10 {
		t.Fatalf("SETTINGS_MAX_HEADER_LIST_SIZE = %d, want %d", got, 8<<10)
	}
}
