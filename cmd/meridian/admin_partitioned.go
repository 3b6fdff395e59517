package main

import (
	"context"
	"fmt"

	"github.com/meridianmq/meridian/client"
	"github.com/spf13/cobra"
)

// newPartitionedCmds are the partitioned-topic commands of `meridian admin
// topics`, in pulsar-admin's spelling (with the short aliases the issue
// names): create-partitioned-topic, update-partitioned-topic,
// get-partitioned-topic-metadata, list-partitioned-topics,
// delete-partitioned-topic, partitioned-stats.
func newPartitionedCmds(o *adminOpts) []*cobra.Command {
	return []*cobra.Command{
		newPartitionCountCmd(o, "create-partitioned-topic", []string{"create-partitioned"},
			"Create a partitioned topic of N partitions (topics TOPIC-partition-0..N-1)", "created partitioned topic",
			func(ctx context.Context, a *client.Admin, topic string, n int) error {
				return a.CreatePartitionedTopic(ctx, topic, n)
			}),
		newPartitionCountCmd(o, "update-partitioned-topic", []string{"update-partitions"},
			"Raise a partitioned topic's partition count (it can never be lowered)", "updated partitioned topic",
			func(ctx context.Context, a *client.Admin, topic string, n int) error {
				return a.UpdatePartitionedTopic(ctx, topic, n)
			}),
		{
			Use:     "get-partitioned-topic-metadata TOPIC",
			Aliases: []string{"partitioned-metadata"},
			Short:   "Show a topic's partition count (0: not partitioned)",
			RunE: adminRun(o, 1, func(ctx context.Context, a *client.Admin, out *adminOut, args []string) error {
				md, err := a.PartitionedTopicMetadata(ctx, args[0])
				if err != nil {
					return err
				}
				if out.json {
					out.message(md)
					return nil
				}
				stale := ""
				if md.GetStale() {
					stale = " (stale: the global metadata could not be read; last seen value)"
				}
				fmt.Fprintf(out.w, "%s partitions=%d%s\n", md.GetTopic(), md.GetPartitions(), stale)
				return nil
			}),
		},
		{
			Use:   "list-partitioned-topics NAMESPACE",
			Short: "List a namespace's partitioned topics and their partition counts",
			RunE: adminRun(o, 1, func(ctx context.Context, a *client.Admin, out *adminOut, args []string) error {
				ts, err := a.ListPartitionedTopics(ctx, args[0])
				if err != nil {
					return err
				}
				if out.json {
					type entry struct {
						Topic      string `json:"topic"`
						Partitions int32  `json:"partitions"`
					}
					list := []entry{}
					for _, t := range ts {
						list = append(list, entry{t.GetTopic(), t.GetPartitions()})
					}
					(&lineWriter{w: out.w}).json(map[string]any{"topics": list})
					return nil
				}
				for _, t := range ts {
					fmt.Fprintf(out.w, "%s partitions=%d\n", t.GetTopic(), t.GetPartitions())
				}
				return nil
			}),
		},
		newDeletePartitionedCmd(o),
		newPartitionedStatsCmd(o),
	}
}

// newPartitionCountCmd is create- or update-partitioned-topic: TOPIC and
// --partitions/-p N, checked before connecting.
func newPartitionCountCmd(o *adminOpts, use string, aliases []string, short, done string, fn func(context.Context, *client.Admin, string, int) error) *cobra.Command {
	var n int
	cmd := &cobra.Command{Use: use + " TOPIC -p N", Aliases: aliases, Short: short}
	cmd.PreRunE = func(cmd *cobra.Command, _ []string) error {
		if !cmd.Flags().Changed("partitions") {
			return fmt.Errorf("--partitions (-p) is required: 1..%d", client.MaxPartitions)
		}
		if n < 1 || n > client.MaxPartitions {
			return fmt.Errorf("--partitions %d: want 1..%d", n, client.MaxPartitions)
		}
		return nil
	}
	cmd.RunE = adminRun(o, 1, func(ctx context.Context, a *client.Admin, out *adminOut, args []string) error {
		if err := fn(ctx, a, args[0], n); err != nil {
			return err
		}
		if out.json {
			(&lineWriter{w: out.w}).json(map[string]any{"result": "ok", "action": done, "name": args[0], "partitions": n})
			return nil
		}
		fmt.Fprintf(out.w, "%s %s (%d partitions)\n", done, args[0], n)
		return nil
	})
	cmd.Flags().IntVarP(&n, "partitions", "p", 0, fmt.Sprintf("partition count, 1..%d (required)", client.MaxPartitions))
	return cmd
}

func newDeletePartitionedCmd(o *adminOpts) *cobra.Command {
	var force bool
	cmd := &cobra.Command{
		Use:   "delete-partitioned-topic TOPIC",
		Short: "Delete a partitioned topic's partitions in this region and its partition count",
		Long: `Delete every partition of TOPIC in this region (refused while a partition has producers or
consumers, unless --force) and then the global partition count. Partitions in other regions
keep their data: delete them there too (their count is gone, so delete them as plain topics).`,
	}
	cmd.RunE = adminRun(o, 1, func(ctx context.Context, a *client.Admin, out *adminOut, args []string) error {
		n, err := a.DeletePartitionedTopic(ctx, args[0], force)
		if err != nil {
			return err
		}
		if out.json {
			(&lineWriter{w: out.w}).json(map[string]any{"result": "ok", "action": "deleted partitioned topic", "name": args[0], "deleted_partitions": n})
			return nil
		}
		fmt.Fprintf(out.w, "deleted partitioned topic %s (%d partitions here)\n", args[0], n)
		return nil
	})
	cmd.Flags().BoolVarP(&force, "force", "f", false, "disconnect producers and consumers first")
	return cmd
}

func newPartitionedStatsCmd(o *adminOpts) *cobra.Command {
	var perPartition bool
	cmd := &cobra.Command{
		Use:   "partitioned-stats TOPIC",
		Short: "Show a partitioned topic's stats, summed over its partitions",
		Long: `Show a partitioned topic's stats: rates and counters summed over its partitions, each
subscription merged across them (backlogs add up). --per-partition adds each partition's stats
(partitionStats). On a topic that is not partitioned it shows the topic's own stats.`,
	}
	cmd.RunE = adminRun(o, 1, func(ctx context.Context, a *client.Admin, out *adminOut, args []string) error {
		st, err := a.PartitionedTopicStats(ctx, args[0])
		if err != nil {
			return err
		}
		if !perPartition {
			st.PartitionStats = nil
		}
		out.message(st)
		if !out.json && st.GetMissingPartitions() > 0 {
			fmt.Fprintf(out.w, "note: %d of %d partitions have no topic in this region yet (created on first use)\n", st.GetMissingPartitions(), st.GetPartitions())
		}
		return nil
	})
	cmd.Flags().BoolVar(&perPartition, "per-partition", false, "also show each partition's stats")
	return cmd
}

// partitionField is the "partition" of a produce or consume JSON line:
// set on a partitioned topic only.
func partitionField(partitions int, id client.MessageID) *int32 {
	if partitions == 0 {
		return nil
	}
	p := id.Partition
	return &p
}
