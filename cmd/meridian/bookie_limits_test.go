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
