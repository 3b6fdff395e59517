//go:build unix

package drill

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/meridianmq/meridian/chaos"
	"github.com/meridianmq/meridian/region"
)

// devControl is what a fault needs of the dev cluster's control API
// (region.DevControlClient).
type devControl interface {
	Status(ctx context.Context) (region.DevStatus, error)
	Link(ctx context.Context, req region.DevLinkRequest) (region.DevStatus, error)
	Process(ctx context.Context, req region.DevProcessRequest) (region.DevStatus, error)
}

// fault injects and heals one fault in one region.
type fault struct {
	kind   string
	region string
	ctl    devControl
	log    *slog.Logger
	// net holds the drill's proxies between its clients and the region's
	// brokers (cut-links); nil for other faults.
	net *chaos.Network
}

// maxStartAttempts bounds the restarts of one process at heal.
const maxStartAttempts = 10

// clientsNode names the drill's clients in the drill's chaos.Network.
const clientsNode = "drill-clients"

// processesOf returns the processes of region r with role (all roles if
// role is "").
func processesOf(st region.DevStatus, r, role string) []region.DevProcessStatus {
	var out []region.DevProcessStatus
	for _, p := range st.Processes {
		if p.Region == r && (role == "" || p.Role == role) {
			out = append(out, p)
		}
	}
	return out
}

// otherRegions returns the cluster's regions other than r.
func otherRegions(st region.DevStatus, r string) []string {
	var out []string
	for _, p := range st.Processes {
		if p.Region != r && !slices.Contains(out, p.Region) {
			out = append(out, p.Region)
		}
	}
	return out
}

// forEach runs f on every process concurrently and joins the errors.
func forEach(ps []region.DevProcessStatus, f func(region.DevProcessStatus) error) error {
	errs := make([]error, len(ps))
	var wg sync.WaitGroup
	for i, p := range ps {
		wg.Go(func() { errs[i] = f(p) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

func (f *fault) signal(ctx context.Context, ps []region.DevProcessStatus, sig string) error {
	return forEach(ps, func(p region.DevProcessStatus) error {
		if _, err := f.ctl.Process(ctx, region.DevProcessRequest{Op: "kill", Role: p.Role, Region: p.Region, Index: p.Index, Signal: sig}); err != nil {
			return fmt.Errorf("drill: %s %s: %w", sig, p.Name, err)
		}
		return nil
	})
}

// inject applies the fault.
func (f *fault) inject(ctx context.Context) error {
	st, err := f.ctl.Status(ctx)
	if err != nil {
		return fmt.Errorf("drill: dev status: %w", err)
	}
	switch f.kind {
	case FaultKillRegion:
		return f.signal(ctx, processesOf(st, f.region, ""), "KILL")
	case FaultPauseBrokers:
		return f.signal(ctx, processesOf(st, f.region, region.RoleBroker), "STOP")
	case FaultCutLinks:
		// The clients' path first: the drill's clients lose the region at
		// the same moment its WAN links go.
		f.net.Cut(clientsNode, f.region, false)
		for _, r := range otherRegions(st, f.region) {
			if _, err := f.ctl.Link(ctx, region.DevLinkRequest{Op: "cut", A: f.region, B: r}); err != nil {
				return fmt.Errorf("drill: cut link %s-%s: %w", f.region, r, err)
			}
		}
		return nil
	case FaultNone:
		return nil
	}
	return fmt.Errorf("drill: fault %q unknown", f.kind)
}

// heal undoes the fault and returns once the region serves again (for
// kill-region: every process restarted and ready).
func (f *fault) heal(ctx context.Context) error {
	st, err := f.ctl.Status(ctx)
	if err != nil {
		return fmt.Errorf("drill: dev status: %w", err)
	}
	switch f.kind {
	case FaultKillRegion:
		// Metadata first (bookies and brokers need it), then bookies
		// (brokers need a write quorum), then brokers.
		for _, role := range []string{region.RoleMeta, region.RoleBookie, region.RoleBroker} {
			err := forEach(processesOf(st, f.region, role), func(p region.DevProcessStatus) error {
				if p.State == "running" {
					return nil
				}
				// A restart can fail when another socket took one of the
				// process's loopback ports while it was dead (they come from
				// the ephemeral range): retry while that clears.
				var err error
				for attempt := 1; attempt <= maxStartAttempts; attempt++ {
					if _, err = f.ctl.Process(ctx, region.DevProcessRequest{Op: "start", Role: p.Role, Region: p.Region, Index: p.Index}); err == nil {
						return nil
					}
					f.log.Warn("drill: restart failed; retrying", "process", p.Name, "attempt", attempt, "err", err)
					select {
					case <-ctx.Done():
						return fmt.Errorf("drill: start %s: %w", p.Name, err)
					case <-time.After(time.Second):
					}
				}
				return fmt.Errorf("drill: start %s: %d attempts: %w", p.Name, maxStartAttempts, err)
			})
			if err != nil {
				return err
			}
		}
		return nil
	case FaultPauseBrokers:
		return f.signal(ctx, processesOf(st, f.region, region.RoleBroker), "CONT")
	case FaultCutLinks:
		for _, r := range otherRegions(st, f.region) {
			if _, err := f.ctl.Link(ctx, region.DevLinkRequest{Op: "heal", A: f.region, B: r}); err != nil {
				return fmt.Errorf("drill: heal link %s-%s: %w", f.region, r, err)
			}
		}
		f.net.Heal(clientsNode, f.region)
		return nil
	case FaultNone:
		return nil
	}
	return fmt.Errorf("drill: fault %q unknown", f.kind)
}
