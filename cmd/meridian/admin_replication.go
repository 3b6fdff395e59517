package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/meridianmq/meridian/client"
	"github.com/spf13/cobra"
)

// addReplicationCmds adds the replication policy commands to the admin
// groups: tenants get / set-allowed-regions, namespaces set-replication /
// get-replication, topics set-replication / get-replication /
// remove-replication, and regions list.
func addReplicationCmds(o *adminOpts, root, tenants, namespaces, topics *cobra.Command) {
	leaf := func(use, short string, nargs int, fn func(ctx context.Context, a *client.Admin, out *adminOut, args []string) error) *cobra.Command {
		return &cobra.Command{Use: use, Short: short, RunE: adminRun(o, nargs, fn)}
	}
	// regionsFlag registers a required --regions flag; an explicit empty
	// value (--regions "") means "none".
	regionsFlag := func(cmd *cobra.Command, what string) *[]string {
		var v []string
		cmd.Flags().StringSliceVar(&v, "regions", nil, what+" (comma-separated; \"\" = none)")
		_ = cmd.MarkFlagRequired("regions")
		return &v
	}

	tget := leaf("get TENANT", "Show a tenant's allowed regions", 1, func(ctx context.Context, a *client.Admin, out *adminOut, args []string) error {
		ti, err := a.GetTenant(ctx, args[0])
		if err != nil {
			return err
		}
		if out.json {
			out.message(ti)
			return nil
		}
		fmt.Fprintf(out.w, "tenant %s allowed regions: %s%s\n", ti.GetTenant(), regionsText(ti.GetAllowedRegions(), "all"), staleNote(ti.GetStale()))
		fmt.Fprintf(out.w, "tenant %s admin roles: %s\n", ti.GetTenant(), regionsText(ti.GetAdminRoles(), "none"))
		return nil
	})
	tset := &cobra.Command{Use: "set-allowed-regions TENANT", Short: "Replace the regions a tenant may use (\"\" = all)"}
	allowed := regionsFlag(tset, "allowed regions")
	tset.RunE = adminRun(o, 1, func(ctx context.Context, a *client.Admin, out *adminOut, args []string) error {
		if err := a.SetTenantAllowedRegions(ctx, args[0], cleanRegions(*allowed)); err != nil {
			return err
		}
		out.done("set allowed regions of tenant", args[0])
		return nil
	})
	tenants.AddCommand(tget, tset)

	nset := &cobra.Command{Use: "set-replication TENANT/NS", Short: "Set the regions a namespace's topics replicate to (\"\" = off)"}
	nsRegions := regionsFlag(nset, "replication regions")
	var nsWait, nsYes bool
	var nsWaitTimeout time.Duration
	nset.Flags().BoolVar(&nsWait, "wait", false, "wait until every region has backfilled the regions added to the list (progress bar on stderr)")
	nset.Flags().DurationVar(&nsWaitTimeout, "wait-timeout", 30*time.Minute, "give up waiting after this long")
	nset.Flags().BoolVar(&nsYes, "yes", false, "also delete, in every region, the replicator cursors towards regions removed from the list (never their data); without it they are only listed")
	nset.RunE = adminRun(o, 1, func(ctx context.Context, a *client.Admin, out *adminOut, args []string) error {
		ns := args[0]
		before, _, err := a.GetNamespaceReplication(ctx, ns)
		if err != nil {
			return err
		}
		after := cleanRegions(*nsRegions)
		if err := a.SetNamespaceReplication(ctx, ns, after); err != nil {
			return err
		}
		out.done("set replication of", ns)
		added, removed := regionDiff(before, after)
		if len(removed) > 0 {
			if err := removeReplicationCursors(ctx, a, out, ns, removed, nsYes); err != nil {
				return err
			}
		}
		if nsWait && len(added) > 0 {
			wctx, cancel := context.WithTimeout(ctx, nsWaitTimeout)
			defer cancel()
			return waitBackfill(wctx, a, out, ns, after, added)
		}
		return nil
	})
	nget := leaf("get-replication TENANT/NS", "Show a namespace's replication regions", 1, func(ctx context.Context, a *client.Admin, out *adminOut, args []string) error {
		rs, stale, err := a.GetNamespaceReplication(ctx, args[0])
		if err != nil {
			return err
		}
		if out.json {
			(&lineWriter{w: out.w}).json(map[string]any{"namespace": args[0], "regions": nonNil(rs), "stale": stale})
			return nil
		}
		fmt.Fprintf(out.w, "%s replicates to: %s%s\n", args[0], regionsText(rs, "none"), staleNote(stale))
		return nil
	})
	namespaces.AddCommand(nset, nget)

	topSet := &cobra.Command{Use: "set-replication TOPIC", Short: "Override a topic's replication regions (\"\" = off for this topic)"}
	topRegions := regionsFlag(topSet, "replication regions")
	topSet.RunE = adminRun(o, 1, func(ctx context.Context, a *client.Admin, out *adminOut, args []string) error {
		if err := a.SetTopicReplication(ctx, args[0], cleanRegions(*topRegions)); err != nil {
			return err
		}
		out.done("set replication of", args[0])
		return nil
	})
	topGet := leaf("get-replication TOPIC", "Show a topic's replication override and effective regions", 1, func(ctx context.Context, a *client.Admin, out *adminOut, args []string) error {
		r, err := a.GetTopicReplication(ctx, args[0])
		if err != nil {
			return err
		}
		if out.json {
			out.message(r)
			return nil
		}
		ov := "none (follows its namespace)"
		if r.GetHasOverride() {
			ov = regionsText(r.GetOverrideRegions(), "off")
		}
		fmt.Fprintf(out.w, "%s override: %s; replicates to: %s%s\n", args[0], ov, regionsText(r.GetEffectiveRegions(), "none"), staleNote(r.GetStale()))
		return nil
	})
	topRemove := leaf("remove-replication TOPIC", "Remove a topic's replication override", 1, func(ctx context.Context, a *client.Admin, out *adminOut, args []string) error {
		if err := a.RemoveTopicReplication(ctx, args[0]); err != nil {
			return err
		}
		out.done("removed replication override of", args[0])
		return nil
	})
	topics.AddCommand(topSet, topGet, topRemove)

	regions := &cobra.Command{Use: "regions", Short: "Regions of the global region registry", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return fmt.Errorf("admin regions: missing action (%s)", subNames(cmd))
		}}
	regions.AddCommand(leaf("list", "List regions: endpoints, reachability, last seen, replication lag", 0,
		func(ctx context.Context, a *client.Admin, out *adminOut, _ []string) error {
			rs, err := a.ListRegions(ctx)
			if err != nil {
				return err
			}
			for _, r := range rs {
				if out.json {
					out.message(r)
					continue
				}
				fmt.Fprintln(out.w, regionLine(r))
			}
			return nil
		}))
	root.AddCommand(regions)
}

// regionLine is one region of `admin regions list` as text.
func regionLine(r *client.RegionStatus) string {
	state := "unreachable"
	if r.GetReachable() {
		state = "reachable"
	}
	if r.GetLocal() {
		state = "local"
	}
	seen := "never"
	if ms := r.GetLastSeenMs(); ms > 0 {
		seen = time.UnixMilli(ms).UTC().Format(time.RFC3339)
	}
	lag := "lag n/a"
	if l := r.GetReplication(); l.GetAvailable() {
		lag = fmt.Sprintf("lag max=%dms backlog=%d msgs/%d bytes topics=%d stalled=%d", l.GetMaxLagMs(), l.GetBacklogMessages(), l.GetBacklogBytes(), l.GetTopics(), l.GetStalled())
	}
	line := fmt.Sprintf("%s endpoints=%s %s (%s) last_seen=%s %s", r.GetName(), regionsText(r.GetEndpoints(), "-"), state, r.GetHealthSource(), seen, lag)
	if e := r.GetHealthError(); e != "" {
		line += " error=" + e
	}
	return line
}

// cleanRegions drops the empty items of a --regions value ("" = none).
func cleanRegions(in []string) []string {
	out := []string{}
	for _, r := range in {
		if r = strings.TrimSpace(r); r != "" {
			out = append(out, r)
		}
	}
	return out
}

func regionsText(rs []string, empty string) string {
	if len(rs) == 0 {
		return empty
	}
	return strings.Join(rs, ",")
}

func staleNote(stale bool) string {
	if stale {
		return " (stale: the global metadata shard is unreachable; last seen policy)"
	}
	return ""
}

// regionDiff returns the regions of after not in before, and of before
// not in after.
func regionDiff(before, after []string) (added, removed []string) {
	for _, r := range after {
		if !slices.Contains(before, r) {
			added = append(added, r)
		}
	}
	for _, r := range before {
		if !slices.Contains(after, r) {
			removed = append(removed, r)
		}
	}
	return added, removed
}

// eachRegion calls fn with an admin client of every registered region
// (its brokers tried in turn); a region none of whose brokers answers is
// reported to fn with the error.
func eachRegion(ctx context.Context, a *client.Admin, fn func(region string, ra *client.Admin, err error) error) error {
	regions, err := a.ListRegions(ctx)
	if err != nil {
		return err
	}
	for _, r := range regions {
		var ra *client.Admin
		var lastErr error = fmt.Errorf("region %s has no registered broker", r.GetName())
		for _, ep := range r.GetEndpoints() {
			actx, cancel := context.WithTimeout(ctx, 5*time.Second)
			opts, err := withCLISecurity(client.Options{URL: ep})
			if err != nil {
				cancel()
				return err
			}
			ra, lastErr = client.NewAdminWithOptions(actx, opts)
			cancel()
			if lastErr == nil {
				break
			}
		}
		if lastErr != nil {
			ra = nil
		}
		err := fn(r.GetName(), ra, lastErr)
		if ra != nil {
			_ = ra.Close(context.Background())
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// removeReplicationCursors deletes (yes) or lists the replicator cursors
// towards the removed regions in every region. The removed regions' data
// is never touched.
func removeReplicationCursors(ctx context.Context, a *client.Admin, out *adminOut, ns string, removed []string, yes bool) error {
	return eachRegion(ctx, a, func(region string, ra *client.Admin, err error) error {
		if err != nil {
			fmt.Fprintf(out.w, "region %s: not reached (%v); its replicator cursors are kept\n", region, err)
			return nil
		}
		for _, gone := range removed {
			if gone == region {
				continue
			}
			topics, applied, err := ra.DeleteReplicationCursors(ctx, ns, gone, yes)
			switch {
			case err != nil:
				fmt.Fprintf(out.w, "region %s: cursors towards %s: %v\n", region, gone, err)
			case applied:
				fmt.Fprintf(out.w, "region %s: deleted the cursors meridian.repl.%s of %d topic(s)\n", region, gone, len(topics))
			case len(topics) > 0:
				fmt.Fprintf(out.w, "region %s: replication to %s stopped; the cursors meridian.repl.%s of %d topic(s) keep their backlog until deleted (rerun with --yes)\n",
					region, gone, gone, len(topics))
			}
		}
		return nil
	})
}

// waitBackfill polls, in every region of the namespace, the replicators
// towards the added regions until none has a backlog, drawing a progress
// bar on stderr.
func waitBackfill(ctx context.Context, a *client.Admin, out *adminOut, ns string, regions, added []string) error {
	var most int64
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		var left, missing int64
		err := eachRegion(ctx, a, func(region string, ra *client.Admin, err error) error {
			if !slices.Contains(regions, region) {
				return nil
			}
			if err != nil {
				missing++
				return nil
			}
			topics, err := ra.ListTopics(ctx, ns)
			if err != nil {
				missing++
				return nil
			}
			for _, topic := range topics {
				st, err := ra.TopicStats(ctx, topic)
				if err != nil {
					missing++
					continue
				}
				for _, to := range added {
					if to == region {
						continue
					}
					found := false
					for _, rs := range st.GetReplicators() {
						if rs.GetRemoteRegion() == to {
							found = true
							left += rs.GetBacklogEntries()
						}
					}
					if !found {
						missing++
					}
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		most = max(most, left)
		frac := 1.0
		if most > 0 {
			frac = 1 - float64(left)/float64(most)
		}
		bar := strings.Repeat("#", int(frac*30)) + strings.Repeat(" ", 30-int(frac*30))
		fmt.Fprintf(os.Stderr, "\rbackfill of %s [%s] %3.0f%%  %d entries left", strings.Join(added, ","), bar, frac*100, left)
		if left == 0 && missing == 0 {
			fmt.Fprintln(os.Stderr)
			out.done("backfilled", ns)
			return nil
		}
		select {
		case <-ctx.Done():
			fmt.Fprintln(os.Stderr)
			return fmt.Errorf("backfill of %s not finished: %d entries left, %d replicator(s) or region(s) not reporting: %w", ns, left, missing, ctx.Err())
		case <-tick.C:
		}
	}
}
