package main

import (
	"strings"
	"testing"
	"time"
)

// TestBookieConfigLimits: a bookie YAML sets the listeners' limits
// against hostile peers (netguard.Limits), keeps the defaults for those
// it does not name, and a bad one is refused naming the field.
func TestBookieConfigLimits(t *testing.T) {
	const base = "id: b1\nlisten_addr: 127.0.0.1:0\njournal_dir: /tmp/j\nledger_dir: /tmp/l\n"
	cfg, _, err := parseBookieConfig([]byte(base + "max_connections_per_ip: 7\nhttp_read_timeout: 5s\n"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Limits.MaxConnectionsPerIP != 7 || cfg.Limits.HTTPReadTimeout != 5*time.Second {
		t.Fatalf("limits not applied: %+v", cfg.Limits)
	}
	if cfg.Limits.HTTPIdleTimeout == 0 || cfg.Limits.MaxStreamsPerConnection == 0 {
		t.Fatalf("defaults lost: %+v", cfg.Limits)
	}
	if _, _, err := parseBookieConfig([]byte(base + "max_connections_per_ip: -1\n")); err == nil || !strings.Contains(err.Error(), "max_connections_per_ip") {
		t.Fatalf("max_connections_per_ip -1: %v", err)
	}
}

// TestBookieConfigAddByteBounds: max_queued_add_bytes and
// max_inflight_add_bytes_per_stream are read from the YAML, default to
// 256 MiB and 32 MiB, and 0 is refused naming the field.
func TestBookieConfigAddByteBounds(t *testing.T) {
	const base = "id: b1\nlisten_addr: 127.0.0.1:0\njournal_dir: /tmp/j\nledger_dir: /tmp/l\n"
	cfg, _, err := parseBookieConfig([]byte(base))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.MaxQueuedAddBytes != 256<<20 || cfg.MaxInflightAddBytesPerStream != 32<<20 {
		t.Fatalf("defaults: %d, %d", cfg.MaxQueuedAddBytes, cfg.MaxInflightAddBytesPerStream)
	}
	cfg, _, err = parseBookieConfig([]byte(base + "max_queued_add_bytes: 1048576\nmax_inflight_add_bytes_per_stream: 65536\n"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.MaxQueuedAddBytes != 1<<20 || cfg.MaxInflightAddBytesPerStream != 64<<10 {
		t.Fatalf("not applied: %d, %d", cfg.MaxQueuedAddBytes, cfg.MaxInflightAddBytesPerStream)
	}
	for _, f := range []string{"max_queued_add_bytes", "max_inflight_add_bytes_per_stream"} {
		if _, _, err := parseBookieConfig([]byte(base + f + ": 0\n")); err == nil || !strings.Contains(err.Error(), f) {
			t.Fatalf("%s 0: %v", f, err)
		}
	}
}
