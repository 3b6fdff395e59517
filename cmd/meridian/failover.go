package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/meridianmq/meridian/client"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// ---- client failover flags of produce and consume ----

// failoverFlags are the multi-region options of produce and consume: a
// --url "a=HOST:P,b=HOST:P" names regions, the first the primary.
type failoverFlags struct {
	mode, group               string
	probeInterval, switchBack time.Duration
	probeTimeout              time.Duration
	failedProbes              int
}

func addFailoverFlags(fl *pflag.FlagSet, f *failoverFlags) {
	fl.StringVar(&f.mode, "failover", "auto", `with --url "a=HOST:P,b=HOST:P": auto (probe the regions, switch after --failed-probes failures) or controlled (follow --failover-group's target)`)
	fl.StringVar(&f.group, "failover-group", "", "failover group whose target region the client follows (--failover controlled)")
	fl.DurationVar(&f.probeInterval, "probe-interval", time.Second, "how often each region is probed (or the group target read)")
	fl.DurationVar(&f.probeTimeout, "probe-timeout", 0, "bound of one probe (default: --probe-interval, at most 2s)")
	fl.IntVar(&f.failedProbes, "failed-probes", 3, "failed probes in a row of the active region before switching")
	fl.DurationVar(&f.switchBack, "switch-back-delay", 30*time.Second, "how long the primary must be healthy before switching back (negative: never)")
}

// options returns the client failover options, naming the bad flag.
func (f *failoverFlags) options() (client.FailoverOptions, error) {
	mode, err := client.ParseFailoverMode(f.mode)
	if err != nil {
		return client.FailoverOptions{}, fmt.Errorf("--failover %q: want auto or controlled", f.mode)
	}
	if mode == client.FailoverControlled && f.group == "" {
		return client.FailoverOptions{}, errors.New("--failover controlled needs --failover-group")
	}
	if f.probeInterval < client.MinProbeInterval {
		return client.FailoverOptions{}, fmt.Errorf("--probe-interval %v: must be >= %v", f.probeInterval, client.MinProbeInterval)
	}
	if f.probeTimeout < 0 {
		return client.FailoverOptions{}, fmt.Errorf("--probe-timeout %v: must be >= 0", f.probeTimeout)
	}
	if f.failedProbes < 1 || f.failedProbes > client.MaxFailedProbes {
		return client.FailoverOptions{}, fmt.Errorf("--failed-probes %d: out of range [1, %d]", f.failedProbes, client.MaxFailedProbes)
	}
	return client.FailoverOptions{Mode: mode, Group: f.group, ProbeInterval: f.probeInterval, ProbeTimeout: f.probeTimeout,
		FailedProbes: f.failedProbes, SwitchBackDelay: f.switchBack}, nil
}

// connectFailover opens a client on url; a url naming regions
// ("a=HOST:P,b=HOST:P") makes a multi-region client with f's policy that
// reports every switch on stderr.
func connectFailover(ctx context.Context, url string, timeout time.Duration, verbose bool, f *failoverFlags) (*client.Client, error) {
	if url == "" {
		return nil, errors.New("--url is required (host:port of a broker, or region=host:port,...)")
	}
	regions, err := client.ParseRegionURLs(url)
	if err != nil {
		return nil, fmt.Errorf("--url %s: %w", url, err)
	}
	if regions == nil {
		return connect(ctx, url, timeout, verbose)
	}
	fo, err := f.options()
	if err != nil {
		return nil, err
	}
	opts, err := withCLISecurity(client.Options{Regions: regions, Failover: fo, ConnectTimeout: timeout, Logger: toolLogger(verbose),
		OnFailover: func(ev client.FailoverEvent) {
			fmt.Fprintf(os.Stderr, "failover: %s -> %s (%s), reconnected %v after the cause\n", ev.From, ev.To, ev.Reason, ev.Took.Round(time.Millisecond))
		}})
	if err != nil {
		return nil, err
	}
	c, err := client.New(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("--url %s: %w", url, err)
	}
	return c, nil
}

// ---- meridian admin failover set|get ----

func newFailoverAdminCmd(o *adminOpts) *cobra.Command {
	g := &cobra.Command{Use: "failover", Short: "Failover groups: the region their clients (--failover controlled) use", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return fmt.Errorf("admin failover: missing action (%s)", subNames(cmd))
		}}
	set := &cobra.Command{Use: "set GROUP REGION", Short: "Move a failover group's clients to REGION",
		RunE: adminRun(o, 2, func(ctx context.Context, a *client.Admin, out *adminOut, args []string) error {
			t, err := a.SetFailoverTarget(ctx, args[0], args[1])
			if err != nil {
				return err
			}
			printFailoverTarget(out, t)
			return nil
		})}
	get := &cobra.Command{Use: "get GROUP", Short: "Show a failover group's target region",
		RunE: adminRun(o, 1, func(ctx context.Context, a *client.Admin, out *adminOut, args []string) error {
			t, err := a.GetFailoverTarget(ctx, args[0])
			if err != nil {
				return err
			}
			printFailoverTarget(out, t)
			return nil
		})}
	g.AddCommand(set, get)
	return g
}

func printFailoverTarget(out *adminOut, t *client.FailoverTarget) {
	if out.json {
		out.message(t)
		return
	}
	fmt.Fprintf(out.w, "failover group %s: region %s (version %d, set %s)\n", t.GetGroup(), t.GetRegion(), t.GetVersion(),
		strings.TrimSpace(time.UnixMilli(t.GetUpdatedMs()).UTC().Format(time.RFC3339)))
	if t.GetStale() {
		confirmed := "never"
		if ms := t.GetConfirmedMs(); ms > 0 {
			confirmed = time.UnixMilli(ms).UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(out.w, "  STALE: this broker could not read the global metadata; a newer target may exist (last confirmed %s)\n", confirmed)
	}
}
