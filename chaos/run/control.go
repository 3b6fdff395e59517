//go:build unix

package run

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/meridianmq/meridian/region"
)

// linkReq is region.DevLinkRequest (a local name keeps the catalogue
// short).
type linkReq = region.DevLinkRequest

// cluster is the runner's handle on a dev cluster: its control API, its
// shape and the WAN latencies it started with (a latency fault's heal
// restores them).
type cluster struct {
	addr  string
	ctl   *region.DevControlClient
	log   *slog.Logger
	shape Shape
	// procs: every process endpoint, in status order.
	procs []string
	// base: the WAN links' latency and jitter at the start, "a->b".
	base map[string][2]time.Duration
	// note adds a line to the run's notes (may be nil).
	notes func(string)
	// ops are the operator actions' handle on the run (nil until the
	// workload is open).
	ops *operator
}

func (c *cluster) note(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	c.log.Warn("chaos: " + msg)
	if c.notes != nil {
		c.notes(msg)
	}
}

// startOnce starts an exited process once and reports why it failed
// (the process's own last words included, as the dev API gives them).
func (c *cluster) startOnce(ctx context.Context, name string) error {
	if s, err := c.procState(ctx, name); err != nil || s == "running" {
		return err
	}
	err := c.process(ctx, "start", name, "")
	if err != nil {
		if log := c.lastLog(name); log != "" {
			err = fmt.Errorf("%w: %s", err, log)
		}
	}
	return err
}

// lastLog returns the last line of a process's log file ("" if unknown).
func (c *cluster) lastLog(name string) string {
	st, err := c.status(context.Background())
	if err != nil {
		return ""
	}
	for _, p := range st.Processes {
		if procName(p.Region, p.Role, p.Index) == name && p.Log != "" {
			b, err := os.ReadFile(p.Log)
			if err != nil {
				return ""
			}
			lines := strings.Split(strings.TrimSpace(string(b)), "\n")
			return lines[len(lines)-1]
		}
	}
	return ""
}

// newCluster reads the cluster's status through its control address.
func newCluster(ctx context.Context, addr, token string, log *slog.Logger) (*cluster, region.DevStatus, error) {
	c := &cluster{addr: addr, ctl: &region.DevControlClient{Addr: addr, Token: token, HTTP: &http.Client{Timeout: faultTimeout}}, log: log, base: map[string][2]time.Duration{}}
	st, err := c.status(ctx)
	if err != nil {
		return nil, st, err
	}
	count := map[string]map[string]int{}
	for _, p := range st.Processes {
		if count[p.Region] == nil {
			count[p.Region] = map[string]int{}
			c.shape.Regions = append(c.shape.Regions, p.Region)
		}
		count[p.Region][p.Role]++
		c.procs = append(c.procs, procName(p.Region, p.Role, p.Index))
	}
	slices.Sort(c.shape.Regions)
	for i, r := range c.shape.Regions {
		m, b, k := count[r][region.RoleMeta], count[r][region.RoleBookie], count[r][region.RoleBroker]
		if i == 0 {
			c.shape.Meta, c.shape.Bookies, c.shape.Brokers = m, b, k
		}
		// Targets are picked by index from the smallest region.
		c.shape.Meta, c.shape.Bookies, c.shape.Brokers = min(c.shape.Meta, m), min(c.shape.Bookies, b), min(c.shape.Brokers, k)
	}
	for _, l := range st.Links {
		lat, _ := time.ParseDuration(l.Latency)
		jit, _ := time.ParseDuration(l.Jitter)
		c.base[l.From+"->"+l.To] = [2]time.Duration{lat, jit}
	}
	return c, st, c.shape.Validate()
}

func (c *cluster) baseLatency(a, b string) (time.Duration, time.Duration) {
	v := c.base[a+"->"+b]
	return v[0], v[1]
}

// regionProcs returns the processes of region r (meta first, then
// bookies, then brokers: the order they must start in).
func (c *cluster) regionProcs(r string) []string {
	var out []string
	for _, role := range []string{region.RoleMeta, region.RoleBookie, region.RoleBroker} {
		for _, p := range c.procs {
			if reg, ro, _, err := parseProc(p); err == nil && reg == r && ro == role {
				out = append(out, p)
			}
		}
	}
	return out
}

func (c *cluster) eachOther(r string, f func(other string) error) error {
	var errs []error
	for _, o := range c.shape.Regions {
		if o != r {
			errs = append(errs, f(o))
		}
	}
	return errors.Join(errs...)
}

func (c *cluster) status(ctx context.Context) (region.DevStatus, error) {
	return c.ctl.Status(ctx)
}

func (c *cluster) link(ctx context.Context, req linkReq) error {
	_, err := c.ctl.Link(ctx, req)
	return err
}

func (c *cluster) process(ctx context.Context, op, name, sig string) error {
	reg, role, idx, err := parseProc(name)
	if err != nil {
		return err
	}
	if _, err := c.ctl.Process(ctx, region.DevProcessRequest{Op: op, Role: role, Region: reg, Index: idx, Signal: sig}); err != nil {
		return fmt.Errorf("%s %s %s: %w", op, sig, name, err)
	}
	return nil
}

func (c *cluster) diskOn(ctx context.Context, bookie, cmd string) error {
	reg, _, idx, err := parseProc(bookie)
	if err != nil {
		return err
	}
	if _, err := c.ctl.Disk(ctx, region.DevDiskRequest{Region: reg, Index: idx, Command: cmd}); err != nil {
		return fmt.Errorf("disk %q on %s: %w", cmd, bookie, err)
	}
	return nil
}

func (c *cluster) clock(ctx context.Context, meta, skew string) error {
	reg, _, idx, err := parseProc(meta)
	if err != nil {
		return err
	}
	if _, err := c.ctl.Clock(ctx, region.DevClockRequest{Region: reg, Index: idx, Skew: skew}); err != nil {
		return fmt.Errorf("clock %s on %s: %w", skew, meta, err)
	}
	return nil
}

// forAll runs f on every name concurrently and joins the errors.
func forAll(names []string, f func(string) error) error {
	errs := make([]error, len(names))
	var wg sync.WaitGroup
	for i, n := range names {
		wg.Go(func() { errs[i] = f(n) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

func (c *cluster) signalAll(ctx context.Context, names []string, sig string) error {
	return forAll(names, func(n string) error { return c.process(ctx, "kill", n, sig) })
}

// procState returns the state of one process ("running", "paused",
// "exited", ...).
func (c *cluster) procState(ctx context.Context, name string) (string, error) {
	st, err := c.status(ctx)
	if err != nil {
		return "", err
	}
	for _, p := range st.Processes {
		if procName(p.Region, p.Role, p.Index) == name {
			return string(p.State), nil
		}
	}
	return "", fmt.Errorf("process %s: not in the cluster's status", name)
}

// waitExited polls until the process has exited.
func (c *cluster) waitExited(ctx context.Context, name string) error {
	for {
		s, err := c.procState(ctx, name)
		if err == nil && s == "exited" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s did not exit (state %s): %w", name, s, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// stopAll stops processes gracefully (SIGTERM, then SIGKILL after 30s)
// and waits until they exited.
func (c *cluster) stopAll(ctx context.Context, names []string) error {
	return forAll(names, func(n string) error {
		if err := c.process(ctx, "kill", n, "TERM"); err != nil {
			return err
		}
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if c.waitExited(wctx, n) == nil {
			return nil
		}
		if err := c.process(ctx, "kill", n, "KILL"); err != nil {
			return err
		}
		return c.waitExited(ctx, n)
	})
}

// maxStartAttempts bounds the restarts of one process: a restart fails
// when another socket took one of its loopback ports while it was dead.
const maxStartAttempts = 10

// startAll starts the processes that are not running, role by role (meta,
// bookies, brokers), and waits until they are ready. A paused process is
// resumed.
func (c *cluster) startAll(ctx context.Context, names []string) error {
	byRole := map[string][]string{}
	for _, n := range names {
		_, role, _, err := parseProc(n)
		if err != nil {
			return err
		}
		byRole[role] = append(byRole[role], n)
	}
	for _, role := range []string{region.RoleMeta, region.RoleBookie, region.RoleBroker} {
		err := forAll(byRole[role], func(n string) error {
			var err error
			for attempt := 1; attempt <= maxStartAttempts; attempt++ {
				var s string
				if s, err = c.procState(ctx, n); err == nil {
					switch s {
					case "running":
						return nil
					case "paused":
						err = c.process(ctx, "kill", n, "CONT")
					default:
						err = c.process(ctx, "start", n, "")
					}
					if err == nil {
						continue // check it runs now
					}
				}
				c.log.Warn("chaos: start failed; retrying", "process", n, "attempt", attempt, "err", err)
				select {
				case <-ctx.Done():
					return fmt.Errorf("start %s: %w", n, err)
				case <-time.After(time.Second):
				}
			}
			return fmt.Errorf("start %s: %d attempts: %w", n, maxStartAttempts, err)
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// healAll undoes whatever may be left: every link healed and unshaped,
// WAN latencies restored, disk faults cleared, clocks restored, every
// process running. Each part is tried; the errors are joined. withDisk
// and withClock are false when the cluster has no fault injection.
func (c *cluster) healAll(ctx context.Context, withDisk, withClock bool) error {
	var errs []error
	// heal-all exists only with the netfault ops; the per-pair heals work
	// everywhere.
	if err := c.link(ctx, linkReq{Op: "heal-all"}); err != nil {
		c.log.Debug("chaos: heal-all", "err", err)
	}
	for _, a := range c.shape.Regions {
		for _, b := range c.shape.Regions {
			if a < b {
				errs = append(errs, c.link(ctx, linkReq{Op: "heal", A: a, B: b}))
				lat, jit := c.baseLatency(a, b)
				errs = append(errs, c.link(ctx, linkReq{Op: "latency", A: a, B: b, Latency: lat.String(), Jitter: jit.String()}))
			}
		}
	}
	errs = append(errs, c.startAll(ctx, c.procs))
	for _, p := range c.procs {
		_, role, _, _ := parseProc(p)
		switch {
		case role == region.RoleBookie && withDisk:
			errs = append(errs, c.diskOn(ctx, p, "clear"))
		case role == region.RoleMeta && withClock:
			errs = append(errs, c.clock(ctx, p, "0"))
		}
	}
	return errors.Join(errs...)
}
