package autorecovery_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/meridianmq/meridian/bookie/autorecovery"
	"github.com/meridianmq/meridian/metadata"
	"github.com/meridianmq/meridian/metadata/metadatatest"
	"github.com/meridianmq/meridian/topology"
)

func TestConfigValidate(t *testing.T) {
	store := metadatatest.Start(t)
	pl, err := topology.NewRackAwarePlacement(topology.DefaultRackAwareConfig())
	if err != nil {
		t.Fatal(err)
	}
	goodA := func() autorecovery.AuditorConfig {
		c := autorecovery.DefaultAuditorConfig()
		c.Store, c.ID = store, "a"
		return c
	}
	goodW := func() autorecovery.WorkerConfig {
		c := autorecovery.DefaultWorkerConfig()
		c.Store, c.Placement, c.ID = store, pl, "w"
		return c
	}
	if err := goodA().Validate(); err != nil {
		t.Fatalf("default auditor config: %v", err)
	}
	if err := goodW().Validate(); err != nil {
		t.Fatalf("default worker config: %v", err)
	}
	auditorCases := []struct {
		field string
		edit  func(*autorecovery.AuditorConfig)
	}{
		{"Store", func(c *autorecovery.AuditorConfig) { c.Store = nil }},
		{"ID", func(c *autorecovery.AuditorConfig) { c.ID = "" }},
		{"LostBookieDelay", func(c *autorecovery.AuditorConfig) { c.LostBookieDelay = -time.Second }},
		{"CheckInterval", func(c *autorecovery.AuditorConfig) { c.CheckInterval = 0 }},
		{"AuditInterval", func(c *autorecovery.AuditorConfig) { c.AuditInterval = c.CheckInterval / 2 }},
		{"SessionTTL", func(c *autorecovery.AuditorConfig) { c.SessionTTL = time.Millisecond }},
		{"PageSize", func(c *autorecovery.AuditorConfig) { c.PageSize = metadata.MaxPageLimit + 1 }},
		{"OpTimeout", func(c *autorecovery.AuditorConfig) { c.OpTimeout = 0 }},
	}
	for _, tc := range auditorCases {
		c := goodA()
		tc.edit(&c)
		err := c.Validate()
		if !errors.Is(err, autorecovery.ErrInvalidArgument) || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("auditor %s: got %v, want ErrInvalidArgument naming the field", tc.field, err)
		}
		if _, err := autorecovery.NewAuditor(c); !errors.Is(err, autorecovery.ErrInvalidArgument) {
			t.Errorf("NewAuditor with bad %s: %v", tc.field, err)
		}
	}
	workerCases := []struct {
		field string
		edit  func(*autorecovery.WorkerConfig)
	}{
		{"Store", func(c *autorecovery.WorkerConfig) { c.Store = nil }},
		{"Placement", func(c *autorecovery.WorkerConfig) { c.Placement = nil }},
		{"ID", func(c *autorecovery.WorkerConfig) { c.ID = strings.Repeat("x", autorecovery.MaxBookieIDBytes+1) }},
		{"PollInterval", func(c *autorecovery.WorkerConfig) { c.PollInterval = 0 }},
		{"RetryBackoff", func(c *autorecovery.WorkerConfig) { c.RetryBackoff = -1 }},
		{"SessionTTL", func(c *autorecovery.WorkerConfig) { c.SessionTTL = 0 }},
		{"CopyConcurrency", func(c *autorecovery.WorkerConfig) { c.CopyConcurrency = 0 }},
		{"MaxMarksPerPoll", func(c *autorecovery.WorkerConfig) { c.MaxMarksPerPoll = 5000 }},
		{"RPCTimeout", func(c *autorecovery.WorkerConfig) { c.RPCTimeout = 0 }},
		{"OpTimeout", func(c *autorecovery.WorkerConfig) { c.OpTimeout = -1 }},
		{"MaxEntryBytes", func(c *autorecovery.WorkerConfig) { c.MaxEntryBytes = 0 }},
	}
	for _, tc := range workerCases {
		c := goodW()
		tc.edit(&c)
		err := c.Validate()
		if !errors.Is(err, autorecovery.ErrInvalidArgument) || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("worker %s: got %v, want ErrInvalidArgument naming the field", tc.field, err)
		}
		if _, err := autorecovery.NewWorker(c); !errors.Is(err, autorecovery.ErrInvalidArgument) {
			t.Errorf("NewWorker with bad %s: %v", tc.field, err)
		}
	}
}

// TestBadInputChangesNothing: bad pause reasons and bookie IDs are refused
// with the field and limit named, and nothing is written.
func TestBadInputChangesNothing(t *testing.T) {
	store := metadatatest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := autorecovery.Pause(ctx, store, strings.Repeat("r", 1025))
	if !errors.Is(err, autorecovery.ErrInvalidArgument) || !strings.Contains(err.Error(), "1024") {
		t.Errorf("long reason: %v", err)
	}
	for _, id := range []string{"", "a/b", strings.Repeat("b", autorecovery.MaxBookieIDBytes+1)} {
		if err := autorecovery.Decommission(ctx, store, id); !errors.Is(err, autorecovery.ErrInvalidArgument) {
			t.Errorf("Decommission(%q): %v", id, err)
		}
		if err := autorecovery.Recommission(ctx, store, id); !errors.Is(err, autorecovery.ErrInvalidArgument) {
			t.Errorf("Recommission(%q): %v", id, err)
		}
	}
	st, err := autorecovery.Status(ctx, store)
	if err != nil {
		t.Fatal(err)
	}
	if st.Paused || len(st.Bookies) != 0 || st.UnderReplicatedCount != 0 {
		t.Errorf("bad input changed state: %+v", st)
	}
	// Resume and Recommission of things that are not there succeed.
	if err := autorecovery.Resume(ctx, store); err != nil {
		t.Error(err)
	}
	if err := autorecovery.Recommission(ctx, store, "bookie-x"); err != nil {
		t.Error(err)
	}
}
