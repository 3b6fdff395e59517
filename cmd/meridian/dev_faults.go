package main

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/meridianmq/meridian/region"
	"github.com/spf13/cobra"
)

// devFaultCmds are the fault subcommands of `meridian dev`: disk and clock
// (clusters started with --fault-injection), restart, wipe and
// region-rebuild.
func devFaultCmds(dataDir *string) []*cobra.Command {
	return []*cobra.Command{devDiskCmd(dataDir), devClockCmd(dataDir), devRestartCmd(dataDir), devWipeCmd(dataDir), devRegionRebuildCmd(dataDir)}
}

func devIndex(s string) (int, error) {
	idx, err := strconv.Atoi(s)
	if err != nil || idx < 0 {
		return 0, fmt.Errorf("INDEX: %q is not a number >= 0", s)
	}
	return idx, nil
}

func devDiskCmd(dataDir *string) *cobra.Command {
	return &cobra.Command{
		Use:   "disk REGION INDEX COMMAND...",
		Short: "Apply a disk fault to a bookie (cluster started with --fault-injection)",
		Long: `Apply a disk fault to bookie INDEX of REGION through its fault-injecting file layer:

  fail <op|any> [path-substring|*] [count]     e.g. disk a 0 fail sync journal
  drop <op|any> [path-substring|*] [count]     report success, do nothing
  slow <op|any> [path-substring|*] <duration> [count]   e.g. slow sync journal 50ms
  full on|off                                  disk full (ENOSPC)
  usage <fraction>|off                         report this used fraction
  corrupt <path-substring>                     flip one bit of the newest matching file
  truncate <path-substring> <bytes>            cut the newest matching file's tail
  powerloss                                    lose every unsynced byte, then die
  clear                                        disarm everything (not powerloss)

ops: create open write sync read truncate rename remove mkdir readdir stat syncdir.
After powerloss the bookie has exited: 'meridian dev start bookie REGION INDEX'.`,
		Args: cobra.MinimumNArgs(3),
		RunE: func(cmd *cobra.Command, args []string) error {
			idx, err := devIndex(args[1])
			if err != nil {
				return err
			}
			c, err := devControl(*dataDir)
			if err != nil {
				return err
			}
			r, err := c.Disk(cmd.Context(), region.DevDiskRequest{Region: args[0], Index: idx, Command: strings.Join(args[2:], " ")})
			if err != nil {
				return fmt.Errorf("dev disk: %w", err)
			}
			fmt.Fprintln(cmd.OutOrStdout(), r.Answer)
			return nil
		},
	}
}

func devClockCmd(dataDir *string) *cobra.Command {
	return &cobra.Command{
		Use:   "clock REGION INDEX SKEW",
		Short: "Skew a metadata node's clock, e.g. clock a 0 +5s, clock a 0 -- -3s (0 restores; cluster started with --fault-injection)",
		Args:  cobra.ExactArgs(3),
		RunE: func(cmd *cobra.Command, args []string) error {
			idx, err := devIndex(args[1])
			if err != nil {
				return err
			}
			c, err := devControl(*dataDir)
			if err != nil {
				return err
			}
			r, err := c.Clock(cmd.Context(), region.DevClockRequest{Region: args[0], Index: idx, Skew: args[2]})
			if err != nil {
				return fmt.Errorf("dev clock: %w", err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s/meta-%d: clock skew %s\n", args[0], idx, r.Answer)
			return nil
		},
	}
}

func devRestartCmd(dataDir *string) *cobra.Command {
	return &cobra.Command{
		Use:   "restart ROLE REGION INDEX",
		Short: "Restart a process gracefully (TERM, then KILL after a grace period) and wait until it is ready",
		Args:  cobra.ExactArgs(3),
		RunE: func(cmd *cobra.Command, args []string) error {
			req, err := devProcessArgs(args)
			if err != nil {
				return err
			}
			req.Op = "restart"
			return devProcess(cmd, *dataDir, req)
		},
	}
}

func devWipeCmd(dataDir *string) *cobra.Command {
	return &cobra.Command{
		Use:   "wipe REGION INDEX",
		Short: "Delete the data of an exited bookie and re-format it as a new instance (then 'dev start bookie REGION INDEX')",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			req, err := devProcessArgs([]string{"bookie", args[0], args[1]})
			if err != nil {
				return err
			}
			req.Op = "wipe"
			return devProcess(cmd, *dataDir, req)
		},
	}
}

func devRegionRebuildCmd(dataDir *string) *cobra.Command {
	return &cobra.Command{
		Use:   "region-rebuild REGION",
		Short: "Wipe a whole region (brokers, bookies, regional metadata; not the global shard) and start it again empty under the same name",
		Long: `Rebuild REGION as after its loss: its brokers and bookies are killed, its metadata
node is stopped, the bookies' data is deleted and the region's metadata shard (ownership,
ledger lists, cursors, bookie cookies) is replaced by a new, empty one under the same name
(a new Raft shard ID, recorded in dev.json). The global shard (tenants, namespaces,
policies, region registry, origin incarnations) stays: the region's metadata node keeps
its replica. Then every process of the region starts again with the same addresses, and
the command returns once the region serves public/default.

The other regions keep their copies of the region's old messages; the rebuilt region
does not get its own old messages back (a message never returns to its origin). For the
other regions to backfill theirs into it, take the region out of the replication list
before the rebuild (that deletes their replicator cursors towards it, which stand past
what it loses) and put it back after (see docs/geo/dev.md):

  meridian admin --url B namespaces set-replication NS --regions <the others> --yes
  meridian dev region-rebuild REGION
  meridian admin --url B namespaces set-replication NS --regions <all> --wait`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := devControl(*dataDir)
			if err != nil {
				return err
			}
			r, err := c.Region(cmd.Context(), region.DevRegionRequest{Op: "rebuild", Region: args[0]})
			if err != nil {
				return fmt.Errorf("dev region-rebuild: %w", err)
			}
			fmt.Fprintln(cmd.OutOrStdout(), r.Answer)
			return nil
		},
	}
}
