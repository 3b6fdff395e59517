package broker

import (
	"bytes"
	"github.com/meridianmq/meridian/metadata"
	"log/slog"
	"strings"
	"testing"
	"time"
)

func TestNoSpareBookie(t *testing.T) {
	for _, c := range []struct {
		writable, e int
		want        bool
	}{{3, 3, true}, {2, 3, true}, {4, 3, false}, {1, 1, true}, {5, 3, false}} {
		if got := noSpareBookie(c.writable, c.e); got != c.want {
			t.Fatalf("noSpareBookie(%d writable, E=%d) = %v", c.writable, c.e, got)
		}
	}
}

// TestWarnEveryHoldsBackRepeats: 50 warnings within the interval log one
// line; the next one after the interval says how many were held back.
func TestWarnEveryHoldsBackRepeats(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	w := warnEvery{interval: time.Hour}
	for range 50 {
		w.warn(log, "taking the topic", "topic", "t")
	}
	if n := strings.Count(buf.String(), "taking the topic"); n != 1 {
		t.Fatalf("%d lines logged, want 1:\n%s", n, buf.String())
	}
	w.mu.Lock()
	w.last = time.Now().Add(-2 * time.Hour) // the interval has passed
	w.mu.Unlock()
	w.warn(log, "taking the topic", "topic", "t")
	if !strings.Contains(buf.String(), "suppressed=49") {
		t.Fatalf("no suppressed count:\n%s", buf.String())
	}
}

func TestConfigKeepaliveAndRetentionValidation(t *testing.T) {
	base := DefaultConfig()
	if base.KeepaliveMinTime > 10*time.Second || base.KeepaliveMinTime <= 0 {
		t.Fatalf("keepalive_min_time default %v must allow the client's 10s pings", base.KeepaliveMinTime)
	}
	for _, c := range []struct {
		edit func(*Config)
		want string
	}{
		{func(c *Config) { c.KeepaliveMinTime = 20 * time.Second }, "keepalive_min_time"},
		{func(c *Config) { c.GRPCWindowBytes = 1024 }, "grpc_window_bytes"},
		{func(c *Config) { c.GRPCWindowBytes = -2 }, "grpc_window_bytes"},
		{func(c *Config) { c.KeepaliveTime = 0 }, "keepalive_time"},
		{func(c *Config) { c.KeepaliveTimeout = time.Millisecond }, "keepalive_timeout"},
		{func(c *Config) { c.DefaultRetentionTime = -2 * time.Second }, "default_retention_time"},
		{func(c *Config) { c.DefaultRetentionSizeBytes = -2 }, "default_retention_size_bytes"},
	} {
		cfg := DefaultConfig()
		cfg.Region, cfg.Global, cfg.Regional, cfg.Ledgers = "r", nopStore{}, nopStore{}, nopLedgers{}
		c.edit(&cfg)
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Fatalf("want an error naming %s, got %v", c.want, err)
		}
	}
}

// nopStore and nopLedgers only fill required config fields for Validate.
type nopStore struct{ metadata.Store }
type nopLedgers struct{ LedgerStore }

func TestConfigGRPCWindow(t *testing.T) {
	for _, c := range []struct{ set, want int32 }{{0, DefaultGRPCWindowBytes}, {-1, 0}, {64 << 10, 64 << 10}, {1 << 30, 1 << 30}} {
		cfg := DefaultConfig()
		cfg.Region, cfg.Global, cfg.Regional, cfg.Ledgers = "r", nopStore{}, nopStore{}, nopLedgers{}
		cfg.GRPCWindowBytes = c.set
		if err := cfg.Validate(); err != nil {
			t.Fatalf("grpc_window_bytes %d: %v", c.set, err)
		}
		if got := cfg.grpcWindow(); got != c.want {
			t.Fatalf("grpc_window_bytes %d: window %d, want %d", c.set, got, c.want)
		}
	}
}
