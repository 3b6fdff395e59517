package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
	"github.com/meridianmq/meridian/client"
	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// adminOpts are the persistent flags of `meridian admin`.
type adminOpts struct {
	url, output string
	timeout     time.Duration
	verbose     bool
}

// adminRun wraps an admin action: validate --output, connect, run, close.
func adminRun(o *adminOpts, nargs int, fn func(ctx context.Context, a *client.Admin, out *adminOut, args []string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		if err := checkOutput(o.output); err != nil {
			return err
		}
		if len(args) != nargs {
			return fmt.Errorf("%s: want %d argument(s), got %d (usage: %s)", cmd.CommandPath(), nargs, len(args), cmd.UseLine())
		}
		ctx, stop := signalContext(cmd.Context())
		defer stop()
		c, err := connect(ctx, o.url, o.timeout, o.verbose)
		if err != nil {
			return err
		}
		defer closeQuietly(c)
		a, err := c.Admin()
		if err != nil {
			return err
		}
		return fn(ctx, a, &adminOut{w: cmd.OutOrStdout(), json: o.output == "json"}, args)
	}
}

// adminOut prints admin results as text or one JSON object per line.
type adminOut struct {
	w    io.Writer
	json bool
}

func (o *adminOut) list(field string, items []string) {
	if o.json {
		(&lineWriter{w: o.w}).json(map[string][]string{field: nonNil(items)})
		return
	}
	for _, it := range items {
		fmt.Fprintln(o.w, it)
	}
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func (o *adminOut) done(action, what string) {
	if o.json {
		(&lineWriter{w: o.w}).json(map[string]string{"result": "ok", "action": action, "name": what})
		return
	}
	fmt.Fprintf(o.w, "%s %s\n", action, what)
}

// message prints a protocol message as JSON: one line for --output json,
// indented for text, 64-bit integers as JSON numbers (jsonout.go).
func (o *adminOut) message(m proto.Message) {
	printProto(o.w, m, o.json)
}

func newAdminCmd() *cobra.Command {
	o := &adminOpts{}
	root := &cobra.Command{
		Use:   "admin",
		Short: "Manage tenants, namespaces, topics, subscriptions, brokers, bookies, ledgers, metadata, regions, failover groups and schemas",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			// Listed from the command tree, so a new resource is never left out.
			return fmt.Errorf("admin: missing resource (%s)", subNames(cmd))
		},
	}
	pf := root.PersistentFlags()
	pf.StringVar(&o.url, "url", defaultURL, "broker gRPC address (host:port)")
	pf.StringVar(&o.output, "output", "text", "output format: text or json")
	pf.DurationVar(&o.timeout, "connect-timeout", 10*time.Second, "connection timeout")
	pf.BoolVar(&o.verbose, "verbose", false, "debug logs on stderr")

	group := func(name, short string, subs ...*cobra.Command) *cobra.Command {
		g := &cobra.Command{Use: name, Short: short, Args: cobra.NoArgs,
			RunE: func(cmd *cobra.Command, args []string) error {
				return fmt.Errorf("admin %s: missing action (%s)", name, subNames(cmd))
			}}
		g.AddCommand(subs...)
		return g
	}
	leaf := func(use, short string, nargs int, fn func(ctx context.Context, a *client.Admin, out *adminOut, args []string) error) *cobra.Command {
		return &cobra.Command{Use: use, Short: short, RunE: adminRun(o, nargs, fn)}
	}

	// tenants
	var allowedRegions, tenantAdmins []string
	createTenant := leaf("create TENANT", "Create a tenant", 1, func(ctx context.Context, a *client.Admin, out *adminOut, args []string) error {
		if err := a.CreateTenantWithAdmins(ctx, args[0], cleanRegions(allowedRegions), cleanRegions(tenantAdmins)); err != nil {
			return err
		}
		out.done("created tenant", args[0])
		return nil
	})
	createTenant.Flags().StringSliceVar(&allowedRegions, "allowed-regions", nil, "regions the tenant may use (comma-separated; default all)")
	createTenant.Flags().StringSliceVar(&tenantAdmins, "admin-roles", nil, "roles that may administer everything inside the tenant (comma-separated)")
	tenants := group("tenants", "Tenants",
		leaf("list", "List tenants", 0, func(ctx context.Context, a *client.Admin, out *adminOut, _ []string) error {
			ts, err := a.ListTenants(ctx)
			if err == nil {
				out.list("tenants", ts)
			}
			return err
		}),
		createTenant,
		leaf("delete TENANT", "Delete an empty tenant", 1, func(ctx context.Context, a *client.Admin, out *adminOut, args []string) error {
			if err := a.DeleteTenant(ctx, args[0]); err != nil {
				return err
			}
			out.done("deleted tenant", args[0])
			return nil
		}),
	)

	// namespaces
	pol := &policyFlags{}
	cursorPol := &cursorPolicyFlags{}
	setPolicies := leaf("set-policies TENANT/NS", "Set namespace policies (unset flags keep their current value)", 1,
		func(ctx context.Context, a *client.Admin, out *adminOut, args []string) error {
			cur, err := a.GetNamespacePolicies(ctx, args[0])
			if err != nil {
				return err
			}
			if err := pol.apply(cur); err != nil {
				return err
			}
			if err := cursorPol.apply(cur); err != nil {
				return err
			}
			if err := a.SetNamespacePolicies(ctx, args[0], cur); err != nil {
				return err
			}
			out.done("set policies of", args[0])
			return nil
		})
	pol.register(setPolicies)
	cursorPol.register(setPolicies)
	namespaces := group("namespaces", "Namespaces and their policies",
		leaf("list TENANT", "List a tenant's namespaces", 1, func(ctx context.Context, a *client.Admin, out *adminOut, args []string) error {
			ns, err := a.ListNamespaces(ctx, args[0])
			if err == nil {
				out.list("namespaces", ns)
			}
			return err
		}),
		leaf("create TENANT/NS", "Create a namespace", 1, func(ctx context.Context, a *client.Admin, out *adminOut, args []string) error {
			if err := a.CreateNamespace(ctx, args[0], nil); err != nil {
				return err
			}
			out.done("created namespace", args[0])
			return nil
		}),
		leaf("delete TENANT/NS", "Delete a namespace without topics", 1, func(ctx context.Context, a *client.Admin, out *adminOut, args []string) error {
			if err := a.DeleteNamespace(ctx, args[0]); err != nil {
				return err
			}
			out.done("deleted namespace", args[0])
			return nil
		}),
		leaf("policies TENANT/NS", "Show namespace policies", 1, func(ctx context.Context, a *client.Admin, out *adminOut, args []string) error {
			p, err := a.GetNamespacePolicies(ctx, args[0])
			if err == nil {
				out.message(p)
			}
			return err
		}),
		setPolicies,
	)

	// topics
	var force bool
	del := leaf("delete TOPIC", "Delete a topic and its data", 1, func(ctx context.Context, a *client.Admin, out *adminOut, args []string) error {
		if err := a.DeleteTopic(ctx, args[0], force); err != nil {
			return err
		}
		out.done("deleted topic", args[0])
		return nil
	})
	del.Flags().BoolVar(&force, "force", false, "disconnect producers and consumers first")
	var listPrefix string
	listTopics := leaf("list TENANT/NS", "List a namespace's topics", 1, func(ctx context.Context, a *client.Admin, out *adminOut, args []string) error {
		ts, err := a.ListTopicsWithPrefix(ctx, args[0], listPrefix)
		if err == nil {
			out.list("topics", ts)
		}
		return err
	})
	listTopics.Flags().StringVar(&listPrefix, "prefix", "", "only the topics whose name below the namespace starts with this (e.g. video/)")
	topics := group("topics", "Topics",
		listTopics,
		leaf("create TOPIC", "Create a topic", 1, func(ctx context.Context, a *client.Admin, out *adminOut, args []string) error {
			if err := a.CreateTopic(ctx, args[0]); err != nil {
				return err
			}
			out.done("created topic", args[0])
			return nil
		}),
		del,
		leaf("stats TOPIC", "Show topic stats", 1, func(ctx context.Context, a *client.Admin, out *adminOut, args []string) error {
			s, err := a.TopicStats(ctx, args[0])
			if err == nil {
				out.message(s)
				if !out.json {
					printReplicators(out.w, s)
					printAckReplication(out.w, s)
				}
				if s.GetRetainsNothing() && !out.json {
					fmt.Fprintln(out.w, "note: "+retainsNothingNote(args[0]))
				}
			}
			return err
		}),
		withAliases(leaf("stats-internal TOPIC", "Show a topic's ledgers and cursors (Pulsar: topics stats-internal)", 1, func(ctx context.Context, a *client.Admin, out *adminOut, args []string) error {
			s, err := a.TopicInternalStats(ctx, args[0])
			if err == nil {
				out.message(s)
			}
			return err
		}), "internal-stats"),
		leaf("unload TOPIC", "Make the owner release the topic", 1, func(ctx context.Context, a *client.Admin, out *adminOut, args []string) error {
			if err := a.UnloadTopic(ctx, args[0]); err != nil {
				return err
			}
			out.done("unloaded topic", args[0])
			return nil
		}),
	)

	topics.AddCommand(newSkipLostCmd(o))
	topics.AddCommand(newResetCursorCmd(o))            // admin_resetcursor.go
	topics.AddCommand(newBacklogCmds(o)...)            // admin_backlog.go
	topics.AddCommand(newPulsarSubscriptionCmds(o)...) // admin_backlog.go
	topics.AddCommand(newPartitionedCmds(o)...)        // admin_partitioned.go

	// subscriptions
	var subFrom string
	var subForce, subReplicated bool
	create := leaf("create TOPIC SUBSCRIPTION", "Create a subscription", 2, func(ctx context.Context, a *client.Admin, out *adminOut, args []string) error {
		pos, err := client.ParseInitialPosition(subFrom)
		if err != nil {
			return fmt.Errorf("--from %q: want earliest or latest", subFrom)
		}
		if subReplicated {
			err = a.CreateReplicatedSubscription(ctx, args[0], args[1], pos)
		} else {
			err = a.CreateSubscription(ctx, args[0], args[1], pos)
		}
		if err != nil {
			return err
		}
		out.done("created subscription", args[0]+" "+args[1])
		return nil
	})
	create.Flags().StringVar(&subFrom, "from", "latest", "start position: earliest or latest")
	create.Flags().BoolVar(&subReplicated, "replicated", false, "replicate the subscription's acknowledgements to every region of the namespace")
	sdel := leaf("delete TOPIC SUBSCRIPTION", "Delete a subscription", 2, func(ctx context.Context, a *client.Admin, out *adminOut, args []string) error {
		if err := a.DeleteSubscription(ctx, args[0], args[1], subForce); err != nil {
			return err
		}
		out.done("deleted subscription", args[0]+" "+args[1])
		return nil
	})
	sdel.Flags().BoolVar(&subForce, "force", false, "disconnect consumers first")
	subscriptions := group("subscriptions", "Subscriptions",
		leaf("list TOPIC", "List a topic's subscriptions", 1, func(ctx context.Context, a *client.Admin, out *adminOut, args []string) error {
			ss, err := a.ListSubscriptions(ctx, args[0])
			if err == nil {
				out.list("subscriptions", ss)
			}
			return err
		}),
		create, sdel,
		leaf("reset TOPIC SUBSCRIPTION POSITION", "Move a cursor to earliest, latest, L:E:B or @<unix-ms>", 3,
			func(ctx context.Context, a *client.Admin, out *adminOut, args []string) error {
				pos, err := client.ParseResetPosition(args[2])
				if err != nil {
					return fmt.Errorf("POSITION: %w", err)
				}
				if err := a.ResetSubscription(ctx, args[0], args[1], pos); err != nil {
					return err
				}
				out.done("reset subscription", args[0]+" "+args[1]+" to "+args[2])
				return nil
			}),
	)

	brokers := group("brokers", "Brokers",
		leaf("list", "List live brokers", 0, func(ctx context.Context, a *client.Admin, out *adminOut, _ []string) error {
			bs, err := a.ListBrokers(ctx)
			if err != nil {
				return err
			}
			if out.json {
				lw := &lineWriter{w: out.w}
				for _, b := range bs {
					lw.json(map[string]any{"broker_id": b.GetBrokerId(), "grpc_address": b.GetGrpcAddress(), "http_address": b.GetHttpAddress(), "owned_topics": b.GetOwnedTopics()})
				}
				return nil
			}
			for _, b := range bs {
				fmt.Fprintf(out.w, "%s grpc=%s http=%s topics=%d\n", b.GetBrokerId(), b.GetGrpcAddress(), b.GetHttpAddress(), b.GetOwnedTopics())
			}
			return nil
		}),
	)
	root.AddCommand(tenants, namespaces, topics, subscriptions, brokers, newBookiesCmd(o))
	root.AddCommand(newMetadataAdminCmd(o), newLedgersAdminCmd(o))
	addReplicationCmds(o, root, tenants, namespaces, topics)
	addPermissionCmds(o, tenants, namespaces, topics)
	addPolicyCmds(o, namespaces, topics)
	root.AddCommand(newFailoverAdminCmd(o))
	root.AddCommand(newSchemasAdminCmd(o)) // admin_schemas.go
	return root
}

// adminAPIRun is adminRun for calls the client library does not wrap: it
// dials the broker's Admin gRPC service directly, each call bounded by
// --connect-timeout.
func adminAPIRun(o *adminOpts, nargs int, fn func(ctx context.Context, api clientv1.AdminClient, out *adminOut, args []string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		if err := checkOutput(o.output); err != nil {
			return err
		}
		if len(args) != nargs {
			return fmt.Errorf("%s: want %d argument(s), got %d (usage: %s)", cmd.CommandPath(), nargs, len(args), cmd.UseLine())
		}
		if o.url == "" {
			return fmt.Errorf("--url is required (host:port of a broker)")
		}
		ctx, stop := signalContext(cmd.Context())
		defer stop()
		ctx, cancel := context.WithTimeout(ctx, o.timeout)
		defer cancel()
		cc, err := dialBrokers(o.url)
		if err != nil {
			return err
		}
		defer cc.Close()
		if err := fn(ctx, clientv1.NewAdminClient(cc), &adminOut{w: cmd.OutOrStdout(), json: o.output == "json"}, args); err != nil {
			if st, ok := status.FromError(err); ok {
				if st.Code() == codes.Unavailable || st.Code() == codes.DeadlineExceeded {
					return fmt.Errorf("--url %s: %s", o.url, st.Message())
				}
				return errors.New(st.Message())
			}
			return err
		}
		return nil
	}
}

// newBookiesCmd is `meridian admin bookies`: the region's bookies and
// autorecovery (list, status, pause, resume, decommission, recommission).
func newBookiesCmd(o *adminOpts) *cobra.Command {
	leaf := func(use, short string, nargs int, fn func(ctx context.Context, api clientv1.AdminClient, out *adminOut, args []string) error) *cobra.Command {
		return &cobra.Command{Use: use, Short: short, RunE: adminAPIRun(o, nargs, fn)}
	}
	list := leaf("list", "List bookies: live, read-only, decommissioned, under-replicated ledgers", 0,
		func(ctx context.Context, api clientv1.AdminClient, out *adminOut, _ []string) error {
			r, err := api.ListBookies(ctx, &clientv1.ListBookiesRequest{})
			if err != nil {
				return err
			}
			lw := &lineWriter{w: out.w}
			for _, b := range r.GetBookies() {
				if out.json {
					lw.json(map[string]any{"bookie_id": b.GetBookieId(), "address": b.GetAddress(), "region": b.GetRegion(), "rack": b.GetRack(),
						"live": b.GetLive(), "read_only": b.GetReadOnly(), "decommissioned": b.GetDecommissioned(),
						"under_replicated_ledgers": b.GetUnderReplicatedLedgers(), "read_only_reason": b.GetReadOnlyReason(),
						"instance_id": b.GetInstanceId(), "limbo": b.GetLimboBelowLedger() > 0,
						"limbo_below_ledger": b.GetLimboBelowLedger(), "limbo_reason": b.GetLimboReason()})
					continue
				}
				lw.printf("%s\n", bookieLine(b))
			}
			if !out.json {
				lw.printf("under-replicated ledgers: %d\n", r.GetUnderReplicatedCount())
			}
			return nil
		})
	statusCmd := leaf("status", "Show autorecovery: paused, auditor, under-replicated ledgers", 0,
		func(ctx context.Context, api clientv1.AdminClient, out *adminOut, _ []string) error {
			r, err := api.GetAutorecoveryStatus(ctx, &clientv1.GetAutorecoveryStatusRequest{})
			if err != nil {
				return err
			}
			if out.json {
				out.message(r)
				return nil
			}
			paused := "running"
			if r.GetPaused() {
				paused = "paused (" + r.GetPausedReason() + ")"
			}
			auditor := r.GetAuditor()
			if auditor == "" {
				auditor = "none"
			}
			fmt.Fprintf(out.w, "autorecovery: %s, auditor: %s, under-replicated ledgers: %d\n", paused, auditor, r.GetUnderReplicatedCount())
			for _, b := range r.GetBookies() {
				if b.GetLimboBelowLedger() > 0 {
					fmt.Fprintf(out.w, "bookie %s (instance %s) in limbo below ledger %d: %s\n", b.GetBookieId(), b.GetInstanceId(), b.GetLimboBelowLedger(), b.GetLimboReason())
				}
			}
			for _, u := range r.GetUnderReplicated() {
				fmt.Fprintln(out.w, underReplicatedLine(u))
			}
			return nil
		})
	var reason string
	pause := leaf("pause", "Pause autorecovery (no new marks, no new copies) until resume", 0,
		func(ctx context.Context, api clientv1.AdminClient, out *adminOut, _ []string) error {
			if _, err := api.PauseAutorecovery(ctx, &clientv1.PauseAutorecoveryRequest{Reason: reason}); err != nil {
				return err
			}
			out.done("paused", "autorecovery")
			return nil
		})
	pause.Flags().StringVar(&reason, "reason", "", "free text shown by status (at most 1024 bytes)")
	resume := leaf("resume", "Resume autorecovery", 0,
		func(ctx context.Context, api clientv1.AdminClient, out *adminOut, _ []string) error {
			if _, err := api.ResumeAutorecovery(ctx, &clientv1.ResumeAutorecoveryRequest{}); err != nil {
				return err
			}
			out.done("resumed", "autorecovery")
			return nil
		})
	decom := leaf("decommission BOOKIE_ID", "Re-replicate a bookie's closed ledgers elsewhere (drain it)", 1,
		func(ctx context.Context, api clientv1.AdminClient, out *adminOut, args []string) error {
			if _, err := api.DecommissionBookie(ctx, &clientv1.DecommissionBookieRequest{BookieId: args[0]}); err != nil {
				return err
			}
			out.done("decommissioned bookie", args[0])
			return nil
		})
	recom := leaf("recommission BOOKIE_ID", "Withdraw a decommission", 1,
		func(ctx context.Context, api clientv1.AdminClient, out *adminOut, args []string) error {
			if _, err := api.RecommissionBookie(ctx, &clientv1.RecommissionBookieRequest{BookieId: args[0]}); err != nil {
				return err
			}
			out.done("recommissioned bookie", args[0])
			return nil
		})
	g := &cobra.Command{Use: "bookies", Short: "Bookies and autorecovery", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return fmt.Errorf("admin bookies: missing action (%s)", subNames(cmd))
		}}
	g.AddCommand(list, statusCmd, pause, resume, decom, recom)
	g.AddCommand(newBookiesScrubCmd(o))
	return g
}

func subNames(cmd *cobra.Command) string {
	var n []string
	for _, c := range cmd.Commands() {
		if c.Name() == "help" || c.Name() == "completion" {
			continue
		}
		n = append(n, c.Name())
	}
	return strings.Join(n, ", ")
}

func init() { rootCmd.AddCommand(newAdminCmd()) }

// policyFlags are the flags of `namespaces set-policies`.
type policyFlags struct {
	retentionTime     time.Duration
	retentionSize     int64
	e, qw, qa         int32
	replicationRegion []string
	replicateSubs     bool
	cmd               *cobra.Command
}

func (p *policyFlags) register(cmd *cobra.Command) {
	p.cmd = cmd
	f := cmd.Flags()
	f.DurationVar(&p.retentionTime, "retention-time", 0, "keep acknowledged data this long (-1s = forever)")
	f.Int64Var(&p.retentionSize, "retention-size", 0, "keep at most this many bytes of acknowledged data (-1 = unlimited)")
	f.Int32Var(&p.e, "ensemble", 0, "ensemble size E (1..64)")
	f.Int32Var(&p.qw, "write-quorum", 0, "write quorum Qw (<= E)")
	f.Int32Var(&p.qa, "ack-quorum", 0, "ack quorum Qa (<= Qw)")
	f.StringSliceVar(&p.replicationRegion, "replication-regions", nil, "regions to replicate to (comma-separated)")
	f.BoolVar(&p.replicateSubs, "replicate-subscriptions", false, "make every subscription of the namespace a replicated subscription (--replicate-subscriptions=false to stop)")
}

// apply overwrites the fields whose flags were given; the broker
// validates the result (E >= Qw >= Qa >= 1) and names the field on error.
func (p *policyFlags) apply(cur *client.NamespacePolicies) error {
	fl := p.cmd.Flags()
	if fl.Changed("retention-time") {
		if p.retentionTime < 0 {
			cur.RetentionTimeSeconds = -1
		} else {
			cur.RetentionTimeSeconds = int64(p.retentionTime / time.Second)
		}
	}
	if fl.Changed("retention-size") {
		if p.retentionSize < -1 {
			return fmt.Errorf("--retention-size %d: must be >= -1", p.retentionSize)
		}
		cur.RetentionSizeBytes = p.retentionSize
	}
	for _, q := range []struct {
		name string
		v    int32
		dst  *int32
	}{{"ensemble", p.e, &cur.EnsembleSize}, {"write-quorum", p.qw, &cur.WriteQuorum}, {"ack-quorum", p.qa, &cur.AckQuorum}} {
		if fl.Changed(q.name) {
			if q.v < 0 || q.v > 64 {
				return fmt.Errorf("--%s %d: must be in [0, 64]", q.name, q.v)
			}
			*q.dst = q.v
		}
	}
	if fl.Changed("replication-regions") {
		cur.ReplicationRegions = p.replicationRegion
	}
	if fl.Changed("replicate-subscriptions") {
		cur.ReplicateSubscriptions = p.replicateSubs
	}
	return nil
}

// underReplicatedLine is one mark in `admin bookies status` text output:
// the lost bookies (missing) and the live ones with a damaged (corrupt) or
// partial (incomplete) replica.
func underReplicatedLine(u *clientv1.UnderReplicatedLedger) string {
	return fmt.Sprintf("ledger %d missing=%s corrupt=%s incomplete=%s marked=%s worker=%s", u.GetLedgerId(),
		strings.Join(u.GetMissing(), ","), strings.Join(u.GetCorrupt(), ","), strings.Join(u.GetIncomplete(), ","),
		time.UnixMilli(u.GetMarkedUnixMs()).UTC().Format(time.RFC3339), u.GetWorker())
}

// bookieLine is one bookie in `admin bookies list` text output.
func bookieLine(b *clientv1.BookieStatus) string {
	state := "down"
	switch {
	case b.GetLive() && b.GetReadOnly():
		state = "read-only"
	case b.GetLive():
		state = "read-write"
	}
	if b.GetDecommissioned() {
		state += ",decommissioned"
	}
	if b.GetLimboBelowLedger() > 0 {
		state += ",limbo"
	}
	line := fmt.Sprintf("%s %s addr=%s rack=%s under_replicated=%d", b.GetBookieId(), state, b.GetAddress(), b.GetRack(), b.GetUnderReplicatedLedgers())
	if b.GetInstanceId() != "" {
		line += " instance=" + b.GetInstanceId()
	}
	if b.GetReadOnlyReason() != "" {
		line += fmt.Sprintf(" reason=%q", b.GetReadOnlyReason())
	}
	if b.GetLimboBelowLedger() > 0 {
		line += fmt.Sprintf(" limbo_below_ledger=%d limbo_reason=%q", b.GetLimboBelowLedger(), b.GetLimboReason())
	}
	return line
}

// withAliases adds cobra aliases (an older or Pulsar spelling) to cmd.
func withAliases(cmd *cobra.Command, aliases ...string) *cobra.Command {
	cmd.Aliases = append(cmd.Aliases, aliases...)
	return cmd
}
