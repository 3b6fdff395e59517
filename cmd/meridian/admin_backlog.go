package main

import (
	"context"
	"fmt"
	"time"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
	"github.com/meridianmq/meridian/client"
	"github.com/spf13/cobra"
)

// Backlog commands, in Pulsar's shapes: `meridian admin topics skip`,
// `clear-backlog` (alias skip-all), `expire-messages` and
// `expire-messages-all-subscriptions`. Each acts on one subscription
// (-s) or on every durable subscription (--all-subscriptions; replicator
// cursors and readers never), through the acknowledgement path: on a
// replicated subscription the move reaches the other regions like acks do.

// backlogTarget is the subscription flags shared by the backlog commands.
type backlogTarget struct {
	sub string
	all bool
}

func (b *backlogTarget) register(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVarP(&b.sub, "subscription", "s", "", "subscription name (or --all-subscriptions)")
	f.BoolVar(&b.all, "all-subscriptions", false, "every durable subscription of the topic")
}

// check refuses a missing or doubled target before anything is sent.
func (b *backlogTarget) check() error {
	switch {
	case b.all && b.sub != "":
		return fmt.Errorf("give --subscription (-s) or --all-subscriptions, not both")
	case !b.all && b.sub == "":
		return fmt.Errorf("--subscription (-s) is required (or --all-subscriptions)")
	}
	return nil
}

// printBacklogOp prints a backlog operation's result: one JSON object
// (numbers as numbers) or one line per subscription.
func printBacklogOp(out *adminOut, verb, topic string, r *clientv1.BacklogOpResponse) {
	if out.json {
		out.message(r)
		return
	}
	if len(r.GetSubscriptions()) == 0 {
		fmt.Fprintf(out.w, "%s: no subscription on %s\n", verb, topic)
	}
	for _, s := range r.GetSubscriptions() {
		md := s.GetMarkDeletePosition()
		repl := ""
		if s.GetReplicated() {
			repl = " (replicated: the other regions follow)"
		}
		fmt.Fprintf(out.w, "%s %d entries on subscription %s of %s: backlog %d entries, mark-delete %d:%d%s\n",
			verb, s.GetAcknowledgedEntries(), s.GetSubscription(), topic, s.GetBacklogEntries(), md.GetLedgerId(), md.GetEntryId(), repl)
	}
}

// newBacklogCmds returns the backlog commands of `meridian admin topics`.
func newBacklogCmds(o *adminOpts) []*cobra.Command {
	var skipT backlogTarget
	var count int64
	skip := &cobra.Command{
		Use:   "skip TOPIC (-s SUBSCRIPTION | --all-subscriptions) -n N",
		Short: "Acknowledge the next N unacknowledged entries of a subscription (Pulsar: topics skip)",
		Long: `Acknowledge the next N entries after the subscription's mark-delete position that are not
acknowledged yet. N counts entries (one entry is one producer batch; an unbatched message is one
entry), as Pulsar's skip counts its entries. Delivered but unacknowledged messages among them are
not redelivered.`,
	}
	skip.PreRunE = func(*cobra.Command, []string) error {
		if count < 1 {
			return fmt.Errorf("--count (-n) %d: want an integer >= 1 (entries to skip)", count)
		}
		return skipT.check()
	}
	skip.RunE = adminAPIRun(o, 1, func(ctx context.Context, api clientv1.AdminClient, out *adminOut, args []string) error {
		r, err := api.SkipMessages(ctx, &clientv1.SkipMessagesRequest{Topic: args[0], Subscription: skipT.sub, AllSubscriptions: skipT.all, Entries: count})
		if err != nil {
			return err
		}
		printBacklogOp(out, "skipped", args[0], r)
		return nil
	})
	skipT.register(skip)
	skip.Flags().Int64VarP(&count, "count", "n", 0, "entries to skip (>= 1)")

	var clearT backlogTarget
	clear := &cobra.Command{
		Use:     "clear-backlog TOPIC (-s SUBSCRIPTION | --all-subscriptions)",
		Aliases: []string{"skip-all"},
		Short:   "Acknowledge everything stored on a subscription (Pulsar: topics clear-backlog / skip-all)",
	}
	clear.PreRunE = func(*cobra.Command, []string) error { return clearT.check() }
	clear.RunE = adminAPIRun(o, 1, func(ctx context.Context, api clientv1.AdminClient, out *adminOut, args []string) error {
		r, err := api.ClearBacklog(ctx, &clientv1.ClearBacklogRequest{Topic: args[0], Subscription: clearT.sub, AllSubscriptions: clearT.all})
		if err != nil {
			return err
		}
		printBacklogOp(out, "cleared", args[0], r)
		return nil
	})
	clearT.register(clear)

	expireCmd := func(use, short string, all bool) *cobra.Command {
		var tg backlogTarget
		var ttl string
		cmd := &cobra.Command{
			Use:   use,
			Short: short,
			Long: `Acknowledge the entries published longer ago than --expire-time (-t): from the mark-delete up to
the first entry published later than that (origin publish time: on a replicated topic, when the
message was published in its origin region). --expire-time takes 30s, 10m, 1h, 7d, 2w, 1h30m or
a number of seconds.`,
		}
		var d time.Duration
		cmd.PreRunE = func(*cobra.Command, []string) error {
			var err error
			if d, err = parseDurationFlag("--expire-time", ttl); err != nil {
				return err
			}
			if d < 0 {
				return fmt.Errorf("--expire-time %q: want a duration >= 0", ttl)
			}
			if all {
				tg.all = true
				if tg.sub != "" {
					return fmt.Errorf("--subscription (-s): %s applies to every subscription", cmd.Name())
				}
				return nil
			}
			return tg.check()
		}
		cmd.RunE = adminAPIRun(o, 1, func(ctx context.Context, api clientv1.AdminClient, out *adminOut, args []string) error {
			r, err := api.ExpireMessages(ctx, &clientv1.ExpireMessagesRequest{Topic: args[0], Subscription: tg.sub, AllSubscriptions: tg.all,
				ExpireTimeSeconds: int64(d / time.Second)})
			if err != nil {
				return err
			}
			printBacklogOp(out, "expired", args[0], r)
			return nil
		})
		if all {
			cmd.Flags().StringVarP(&tg.sub, "subscription", "s", "", "not allowed: every subscription is expired")
		} else {
			tg.register(cmd)
		}
		cmd.Flags().StringVarP(&ttl, "expire-time", "t", "", "age past which messages expire: 30s, 10m, 1h, 7d, or seconds (required)")
		_ = cmd.MarkFlagRequired("expire-time")
		return cmd
	}
	return []*cobra.Command{skip, clear,
		expireCmd("expire-messages TOPIC (-s SUBSCRIPTION | --all-subscriptions) -t AGE",
			"Acknowledge a subscription's messages older than AGE (Pulsar: topics expire-messages)", false),
		expireCmd("expire-messages-all-subscriptions TOPIC -t AGE",
			"Acknowledge every subscription's messages older than AGE (Pulsar: topics expire-messages-all-subscriptions)", true),
	}
}

// newPulsarSubscriptionCmds returns Pulsar's spellings of the subscription
// commands under `meridian admin topics`: subscriptions, create-subscription
// and unsubscribe (the same operations as `meridian admin subscriptions
// list|create|delete`).
func newPulsarSubscriptionCmds(o *adminOpts) []*cobra.Command {
	list := &cobra.Command{
		Use:   "subscriptions TOPIC",
		Short: "List a topic's subscriptions (Pulsar: topics subscriptions; = admin subscriptions list)",
		RunE: adminRun(o, 1, func(ctx context.Context, a *client.Admin, out *adminOut, args []string) error {
			ss, err := a.ListSubscriptions(ctx, args[0])
			if err == nil {
				out.list("subscriptions", ss)
			}
			return err
		}),
	}
	var csub, from string
	var replicated bool
	create := &cobra.Command{
		Use:   "create-subscription TOPIC -s SUBSCRIPTION [--from earliest|latest] [--replicated]",
		Short: "Create a subscription (Pulsar: topics create-subscription; = admin subscriptions create)",
	}
	var pos client.InitialPosition
	create.PreRunE = func(*cobra.Command, []string) error {
		if csub == "" {
			return fmt.Errorf("--subscription (-s) is required")
		}
		var err error
		if pos, err = client.ParseInitialPosition(from); err != nil {
			return fmt.Errorf("--from (-m) %q: want earliest or latest", from)
		}
		return nil
	}
	create.RunE = adminRun(o, 1, func(ctx context.Context, a *client.Admin, out *adminOut, args []string) error {
		var err error
		if replicated {
			err = a.CreateReplicatedSubscription(ctx, args[0], csub, pos)
		} else {
			err = a.CreateSubscription(ctx, args[0], csub, pos)
		}
		if err != nil {
			return err
		}
		out.done("created subscription", args[0]+" "+csub)
		return nil
	})
	create.Flags().StringVarP(&csub, "subscription", "s", "", "subscription name (required)")
	create.Flags().StringVarP(&from, "from", "m", "latest", "start position: earliest or latest (Pulsar's --messageId)")
	create.Flags().BoolVar(&replicated, "replicated", false, "replicate the subscription's acknowledgements to every region of the namespace")

	var usub string
	var force bool
	unsub := &cobra.Command{
		Use:   "unsubscribe TOPIC -s SUBSCRIPTION [--force]",
		Short: "Delete a subscription (Pulsar: topics unsubscribe; = admin subscriptions delete)",
	}
	unsub.PreRunE = func(*cobra.Command, []string) error {
		if usub == "" {
			return fmt.Errorf("--subscription (-s) is required")
		}
		return nil
	}
	unsub.RunE = adminRun(o, 1, func(ctx context.Context, a *client.Admin, out *adminOut, args []string) error {
		if err := a.DeleteSubscription(ctx, args[0], usub, force); err != nil {
			return err
		}
		out.done("deleted subscription", args[0]+" "+usub)
		return nil
	})
	unsub.Flags().StringVarP(&usub, "subscription", "s", "", "subscription name (required)")
	unsub.Flags().BoolVarP(&force, "force", "f", false, "disconnect its consumers first")
	return []*cobra.Command{list, create, unsub}
}
