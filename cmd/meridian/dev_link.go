package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/meridianmq/meridian/region"
	"github.com/spf13/cobra"
)

func devLinkShapeCmd(dataDir *string) *cobra.Command {
	var bandwidth, slowClose string
	var drop float64
	var oneway bool
	cmd := &cobra.Command{
		Use:   "shape A B [--bandwidth 1MB] [--drop 0.05] [--slow-close 2s] [--oneway]",
		Short: "Limit bandwidth, drop chunks (retransmitted 200-400ms late) and slow closes between A and B (no flag: remove the shape)",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return devLink(cmd, *dataDir, region.DevLinkRequest{Op: "shape", A: args[0], B: args[1], Oneway: oneway, Bandwidth: bandwidth, Drop: drop, SlowClose: slowClose})
		},
	}
	cmd.Flags().StringVar(&bandwidth, "bandwidth", "", "bytes per second: 1MB, 512KiB, 100000; 0 = no limit")
	cmd.Flags().Float64Var(&drop, "drop", 0, "fraction of chunks dropped (0 to 1); TCP resends them, so they arrive late, in order")
	cmd.Flags().StringVar(&slowClose, "slow-close", "", "delay before a close reaches the other side (e.g. 2s)")
	cmd.Flags().BoolVar(&oneway, "oneway", false, "shape only traffic from A to B")
	return cmd
}

func devLinkPartitionCmd(dataDir *string) *cobra.Command {
	return &cobra.Command{
		Use:   "partition GROUP [GROUP...]",
		Short: "Cut every link between endpoints of different groups (members separated by commas); one group: against all the others",
		Example: "  meridian dev link partition a b,c          # region a alone, b and c together\n" +
			"  meridian dev link partition a/broker-0      # broker-0 cut from a's other processes",
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var groups [][]string
			for _, g := range args {
				groups = append(groups, strings.Split(g, ","))
			}
			return devLink(cmd, *dataDir, region.DevLinkRequest{Op: "partition", Groups: groups})
		},
	}
}

func devLinkHealAllCmd(dataDir *string) *cobra.Command {
	return &cobra.Command{
		Use:   "heal-all",
		Short: "Heal every cut and remove every shape (latencies stay)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return devLink(cmd, *dataDir, region.DevLinkRequest{Op: "heal-all"})
		},
	}
}

// printDevLinks prints the links a request touched: those between A and
// B, or, for partition and heal-all, every link not in its default state.
func printDevLinks(w io.Writer, req region.DevLinkRequest, links []region.DevLinkStatus) {
	n := 0
	for _, l := range links {
		pair := (l.From == req.A && l.To == req.B) || (l.From == req.B && l.To == req.A)
		changed := l.Cut || l.Bandwidth > 0 || l.Drop > 0 || l.SlowClose != "" || l.Latency != "0s" || l.Jitter != "0s"
		if (req.A != "" && !pair) || (req.A == "" && !changed) {
			continue
		}
		n++
		fmt.Fprintf(w, "%s→%s: latency %s jitter %s cut %v", l.From, l.To, l.Latency, l.Jitter, l.Cut)
		if sh := devShapeText(l); sh != "-" {
			fmt.Fprint(w, " ", sh)
		}
		fmt.Fprintln(w)
	}
	if n == 0 && req.A == "" {
		fmt.Fprintln(w, "every link in its default state (region links may keep a latency)")
	}
}

// devShapeText is a link's shape in words ("-" for none).
func devShapeText(l region.DevLinkStatus) string {
	var parts []string
	if l.Bandwidth > 0 {
		parts = append(parts, fmt.Sprintf("bandwidth %d B/s", l.Bandwidth))
	}
	if l.Drop > 0 {
		parts = append(parts, fmt.Sprintf("drop %g", l.Drop))
	}
	if l.SlowClose != "" {
		parts = append(parts, "slow-close "+l.SlowClose)
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, " ")
}
