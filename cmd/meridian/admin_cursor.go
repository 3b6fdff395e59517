package main

import (
	"fmt"
	"time"

	"github.com/meridianmq/meridian/client"
	"github.com/spf13/cobra"
)

// cursorPolicyFlags is the --cursor-persist-interval flag of `namespaces
// set-policies` (the namespace policy cursor_persist_interval_ms).
type cursorPolicyFlags struct {
	interval time.Duration
	cmd      *cobra.Command
}

// maxCursorPersistInterval mirrors the broker's limit for the policy.
const maxCursorPersistInterval = time.Hour

func (p *cursorPolicyFlags) register(cmd *cobra.Command) {
	p.cmd = cmd
	cmd.Flags().DurationVar(&p.interval, "cursor-persist-interval", 0,
		"how long an acknowledgement may stay only in the broker's memory, in whole milliseconds up to 1h "+
			"(a broker crash redelivers at most this much); 0 = persist before answering each ack; negative = the broker's default")
}

// apply sets or clears cursor_persist_interval_ms when the flag was given.
func (p *cursorPolicyFlags) apply(cur *client.NamespacePolicies) error {
	if !p.cmd.Flags().Changed("cursor-persist-interval") {
		return nil
	}
	d := p.interval
	switch {
	case d < 0:
		cur.CursorPersistIntervalMs = nil
		return nil
	case d > maxCursorPersistInterval:
		return fmt.Errorf("--cursor-persist-interval %v: must be in [0, %v] (0 = persist before answering each ack; negative = broker default)", d, maxCursorPersistInterval)
	case d%time.Millisecond != 0:
		return fmt.Errorf("--cursor-persist-interval %v: must be a whole number of milliseconds", d)
	}
	ms := int64(d / time.Millisecond)
	cur.CursorPersistIntervalMs = &ms
	return nil
}
