package broker_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/meridianmq/meridian/broker"
)

// TestReplicationConfigRelayBounds: the relay wait bounds default when
// zero and are refused, naming the field and the limit, when out of range.
func TestReplicationConfigRelayBounds(t *testing.T) {
	d := broker.DefaultReplicationConfig()
	if d.MaxRelayWait <= 0 || d.MaxRelayHeldBytes <= 0 {
		t.Fatalf("defaults: max_relay_wait %v, max_relay_held_bytes %d", d.MaxRelayWait, d.MaxRelayHeldBytes)
	}
	if err := (broker.ReplicationConfig{}).Validate(); err != nil {
		t.Fatalf("zero config: %v", err)
	}
	for _, c := range []struct {
		cfg  broker.ReplicationConfig
		want string
	}{
		{broker.ReplicationConfig{MaxRelayWait: -time.Second}, "max_relay_wait"},
		{broker.ReplicationConfig{MaxRelayWait: time.Hour}, "max_relay_wait"},
		{broker.ReplicationConfig{MaxRelayHeldBytes: -1}, "max_relay_held_bytes"},
		{broker.ReplicationConfig{MaxRelayHeldBytes: 2 << 30}, "max_relay_held_bytes"},
	} {
		err := c.cfg.Validate()
		if !errors.Is(err, broker.ErrInvalidArgument) || !strings.Contains(err.Error(), c.want) {
			t.Fatalf("%+v: %v, want INVALID_ARGUMENT naming %s", c.cfg, err, c.want)
		}
	}
}

// TestReplicationConfigMaxOriginSeqJump: replication.max_origin_seq_jump
// defaults when zero, accepts -1 (strict), and is refused, naming the
// field, when out of range.
func TestReplicationConfigMaxOriginSeqJump(t *testing.T) {
	if d := broker.DefaultReplicationConfig(); d.MaxOriginSeqJump != broker.DefaultMaxOriginSeqJump {
		t.Fatalf("default max_origin_seq_jump %d", d.MaxOriginSeqJump)
	}
	for _, ok := range []int64{-1, 0, 1, 1 << 40} {
		if err := (broker.ReplicationConfig{MaxOriginSeqJump: ok}).Validate(); err != nil {
			t.Fatalf("max_origin_seq_jump %d: %v", ok, err)
		}
	}
	for _, bad := range []int64{-2, 1<<40 + 1} {
		err := (broker.ReplicationConfig{MaxOriginSeqJump: bad}).Validate()
		if !errors.Is(err, broker.ErrInvalidArgument) || !strings.Contains(err.Error(), "max_origin_seq_jump") {
			t.Fatalf("max_origin_seq_jump %d: %v, want INVALID_ARGUMENT naming it", bad, err)
		}
	}
}
