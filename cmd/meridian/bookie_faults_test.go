package main

import (
	"strings"
	"testing"

	"github.com/meridianmq/meridian/internal/faultfs"
)

// unsafe_ack_before_sync is honoured only with fault_injection.
func TestBookieConfigUnsafeAckBeforeSync(t *testing.T) {
	base := "id: b1\njournal_dir: /tmp/x\n"
	if _, _, err := parseBookieConfig([]byte(base + "unsafe_ack_before_sync: true\n")); err == nil || !strings.Contains(err.Error(), "unsafe_ack_before_sync") {
		t.Fatalf("unsafe without fault_injection: %v", err)
	}
	cfg, _, err := parseBookieConfig([]byte(base + "fault_injection: true\nunsafe_ack_before_sync: true\n"))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := cfg.Testing.FS.(*faultfs.FaultFS); !ok || !cfg.Testing.FaultHTTP || !cfg.Testing.UnsafeAckBeforeSync {
		t.Fatalf("testing config %+v", cfg.Testing)
	}
	cfg, _, err = parseBookieConfig([]byte(base + "fault_injection: true\n"))
	if err != nil || cfg.Testing.UnsafeAckBeforeSync {
		t.Fatalf("fault_injection alone: unsafe %v, %v", cfg.Testing.UnsafeAckBeforeSync, err)
	}
}
