package main

import (
	"context"
	"fmt"
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
	nset.RunE = adminRun(o, 1, func(ctx context.Context, a *client.Admin, out *adminOut, args []string) error {
		if err := a.SetNamespaceReplication(ctx, args[0], cleanRegions(*nsRegions)); err != nil {
			return err
		}
		out.done("set replication of", args[0])
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
