package netguard_test

import (
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/meridianmq/meridian/internal/netguard"
	"github.com/meridianmq/meridian/internal/netguard/netguardtest"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// serveHTTP serves a health handler on lis with l's limits.
func serveHTTP(t *testing.T, lis net.Listener, l netguard.Limits) {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	srv := l.HTTPServer(mux, nil)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(func() { _ = srv.Close() })
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return lis
}

// TestPerIPLimitRefusesAndRecovers: connection N+1 from one IP is closed
// on accept and counted, a closed connection frees its slot, and the
// per-IP table is empty once every connection is gone.
func TestPerIPLimitRefusesAndRecovers(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := netguard.NewMetrics(reg, "test")
	if err != nil {
		t.Fatal(err)
	}
	refused := m.RefusedPerIP("http")
	lis := netguard.LimitPerIP(listen(t), 3, refused)
	serveHTTP(t, lis, netguard.DefaultLimits(1))
	netguardtest.CheckPerIPLimit(t, lis.Addr().String(), 3, netguardtest.HTTPProbe)
	var dm dto.Metric
	if err := refused.Write(&dm); err != nil {
		t.Fatal(err)
	}
	if n := dm.GetCounter().GetValue(); n < 1 {
		t.Fatalf("refused counter %v, want >= 1", n)
	}
	// A second registration on the same registry shares the collector.
	if _, err := netguard.NewMetrics(reg, "other"); err != nil {
		t.Fatalf("second NewMetrics on one registry: %v", err)
	}
}

// TestPerIPTableEmptiesAtZero: entries are removed when their count
// returns to zero, and a double Close releases once.
func TestPerIPTableEmptiesAtZero(t *testing.T) {
	raw := listen(t)
	lis := netguard.LimitPerIP(raw, 2, nil).(*netguard.Listener)
	defer lis.Close()
	accepted := make(chan net.Conn, 4)
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	var clients []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", lis.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		clients = append(clients, c)
	}
	s1, s2 := <-accepted, <-accepted
	if got := lis.IPs(); got != 1 {
		t.Fatalf("IPs() = %d with two connections from one IP, want 1", got)
	}
	_ = s1.Close()
	_ = s1.Close() // released once
	ip := s2.RemoteAddr().(*net.TCPAddr).AddrPort().Addr()
	if got := lis.Open(ip); got != 1 {
		t.Fatalf("Open(%v) = %d after one of two closed (twice), want 1", ip, got)
	}
	_ = s2.Close()
	if got := lis.IPs(); got != 0 {
		t.Fatalf("IPs() = %d after every connection closed, want 0 (entries removed at zero)", got)
	}
	for _, c := range clients {
		c.Close()
	}
}

// TestPerIPZeroIsUnlimited: 0 returns the listener unwrapped.
func TestPerIPZeroIsUnlimited(t *testing.T) {
	raw := listen(t)
	defer raw.Close()
	if netguard.LimitPerIP(raw, 0, nil) != raw {
		t.Fatal("LimitPerIP(lis, 0) wrapped the listener; 0 means unlimited")
	}
}

func TestLimitsValidateNamesField(t *testing.T) {
	for _, tc := range []struct {
		field string
		mod   func(*netguard.Limits)
	}{
		{"max_connections_per_ip", func(l *netguard.Limits) { l.MaxConnectionsPerIP = -1 }},
		{"max_streams_per_connection", func(l *netguard.Limits) { l.MaxStreamsPerConnection = 0 }},
		{"max_header_list_bytes", func(l *netguard.Limits) { l.MaxHeaderListBytes = 10 }},
		{"max_connection_idle", func(l *netguard.Limits) { l.MaxConnectionIdle = 0 }},
		{"http_read_timeout", func(l *netguard.Limits) { l.HTTPReadTimeout = 0 }},
		{"http_write_timeout", func(l *netguard.Limits) { l.HTTPWriteTimeout = time.Millisecond }},
		{"http_idle_timeout", func(l *netguard.Limits) { l.HTTPIdleTimeout = 0 }},
		{"http_max_header_bytes", func(l *netguard.Limits) { l.HTTPMaxHeaderBytes = 1 << 30 }},
	} {
		l := netguard.DefaultLimits(10)
		tc.mod(&l)
		err := l.Validate()
		if err == nil || !containsField(err.Error(), tc.field) {
			t.Errorf("%s: Validate() = %v, want an error naming it", tc.field, err)
		}
	}
	if err := netguard.DefaultLimits(10).Validate(); err != nil {
		t.Fatalf("defaults invalid: %v", err)
	}
}

func containsField(s, f string) bool {
	for i := 0; i+len(f) <= len(s); i++ {
		if s[i:i+len(f)] == f {
			return true
		}
	}
	return false
}
