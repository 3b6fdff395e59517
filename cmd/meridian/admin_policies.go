package main

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
	"github.com/meridianmq/meridian/client"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Pulsar-shaped policy commands (issue 10):
//
//	meridian admin namespaces set-retention --size 100G --time 7d TENANT/NS
//	meridian admin topics set-retention --size 1G --time 1d TENANT/NS/TOPIC   (topic override)
//	meridian admin topics set-retention --size 1G --time 1d TENANT/NS/video/  (prefix: trailing '/')
//
// and the same for backlog-quota, message-ttl, max-producers-per-topic,
// max-consumers-per-subscription, max-subscriptions-per-topic,
// auto-topic-creation, auto-subscription-creation, deduplication, persistence and delayed-delivery, each with get-* and
// remove-*. A topic or prefix
// sets only the fields its command names; the others inherit (namespace,
// then every matching prefix, shortest first, then the topic).

// policyKind is one family of policy commands (set-X, get-X, remove-X).
type policyKind struct {
	// name is X in set-X.
	name string
	// what describes it in help texts.
	what string
	// fields are the NamespacePolicies fields the family covers.
	fields []string
	// fieldFlags names set-X's flag of a field, for broker refusals that
	// name the field (nil: the messages name the fields only).
	fieldFlags map[string]string
	// flags registers set-X's flags and returns the function that builds
	// the policies and the fields to set from the flags given.
	flags func(cmd *cobra.Command) func() (*clientv1.NamespacePolicies, []string, error)
}

func policyKinds() []policyKind {
	return []policyKind{
		{name: "retention", what: "retention of acknowledged data (time and size)",
			fields: []string{"retention_time_seconds", "retention_size_bytes"},
			flags: func(cmd *cobra.Command) func() (*clientv1.NamespacePolicies, []string, error) {
				var size, tm string
				cmd.Flags().StringVarP(&size, "size", "s", "", "retention size: 10K, 512M, 100G, 1T, bytes, or -1 (unlimited)")
				cmd.Flags().StringVarP(&tm, "time", "t", "", "retention time: 10s, 30m, 1h, 7d, 2w, a Go duration, or -1 (forever)")
				return func() (*clientv1.NamespacePolicies, []string, error) {
					p, fields := &clientv1.NamespacePolicies{}, []string(nil)
					if !cmd.Flags().Changed("size") && !cmd.Flags().Changed("time") {
						return nil, nil, fmt.Errorf("set-retention: give --size, --time or both")
					}
					if cmd.Flags().Changed("size") {
						n, err := parseSizeFlag("--size", size)
						if err != nil {
							return nil, nil, err
						}
						p.RetentionSizeBytes, fields = n, append(fields, "retention_size_bytes")
					}
					if cmd.Flags().Changed("time") {
						d, err := parseDurationFlag("--time", tm)
						if err != nil {
							return nil, nil, err
						}
						p.RetentionTimeSeconds, fields = durationSeconds(d), append(fields, "retention_time_seconds")
					}
					return p, fields, nil
				}
			}},
		{name: "backlog-quota", what: "backlog quota (size, age, action)",
			fields: []string{"backlog_quota_bytes", "backlog_quota_age_seconds", "backlog_quota_action"},
			flags: func(cmd *cobra.Command) func() (*clientv1.NamespacePolicies, []string, error) {
				var limit, limitTime, policy string
				cmd.Flags().StringVarP(&limit, "limit", "l", "", "backlog size limit: 10K, 512M, 10G, bytes, or -1 (none)")
				cmd.Flags().StringVar(&limitTime, "limit-time", "", "backlog age limit (oldest unacknowledged message): 30m, 1h, 7d, or -1 (none)")
				cmd.Flags().StringVarP(&policy, "policy", "p", "", "action past the quota: producer_request_hold, producer_exception or consumer_backlog_eviction")
				return func() (*clientv1.NamespacePolicies, []string, error) {
					p, fields := &clientv1.NamespacePolicies{}, []string(nil)
					f := cmd.Flags()
					if !f.Changed("limit") && !f.Changed("limit-time") && !f.Changed("policy") {
						return nil, nil, fmt.Errorf("set-backlog-quota: give --limit, --limit-time and/or --policy")
					}
					if f.Changed("limit") {
						n, err := parseSizeFlag("--limit", limit)
						if err != nil {
							return nil, nil, err
						}
						p.BacklogQuotaBytes, fields = &n, append(fields, "backlog_quota_bytes")
					}
					if f.Changed("limit-time") {
						d, err := parseDurationFlag("--limit-time", limitTime)
						if err != nil {
							return nil, nil, err
						}
						s := durationSeconds(d)
						p.BacklogQuotaAgeSeconds, fields = &s, append(fields, "backlog_quota_age_seconds")
					}
					if f.Changed("policy") {
						a, err := parseQuotaPolicy(policy)
						if err != nil {
							return nil, nil, err
						}
						p.BacklogQuotaAction, fields = a, append(fields, "backlog_quota_action")
					}
					return p, fields, nil
				}
			}},
		{name: "message-ttl", what: "message TTL (unacknowledged messages older than it expire)",
			fields: []string{"message_ttl_seconds"},
			flags: func(cmd *cobra.Command) func() (*clientv1.NamespacePolicies, []string, error) {
				var ttl string
				cmd.Flags().StringVar(&ttl, "ttl", "", "message TTL: 10s, 30m, 1h, 7d, a number of seconds, or 0 (none)")
				return func() (*clientv1.NamespacePolicies, []string, error) {
					if !cmd.Flags().Changed("ttl") {
						return nil, nil, fmt.Errorf("set-message-ttl: --ttl is required")
					}
					d, err := parseDurationFlag("--ttl", ttl)
					if err != nil {
						return nil, nil, err
					}
					if d < 0 {
						return nil, nil, fmt.Errorf("--ttl %q: must be >= 0 (0 = no TTL)", ttl)
					}
					s := durationSeconds(d)
					return &clientv1.NamespacePolicies{MessageTtlSeconds: &s}, []string{"message_ttl_seconds"}, nil
				}
			}},
		{name: "max-producers-per-topic", what: "limit of producers per topic (0 = none)",
			fields: []string{"max_producers_per_topic"}, fieldFlags: map[string]string{"max_producers_per_topic": "--max-producers-per-topic"},
			flags: limitFlag("max-producers-per-topic", "max_producers_per_topic", "producers connected to each topic")},
		{name: "max-consumers-per-subscription", what: "limit of consumers per subscription (0 = none)",
			fields: []string{"max_consumers_per_subscription"}, fieldFlags: map[string]string{"max_consumers_per_subscription": "--max-consumers-per-subscription"},
			flags: limitFlag("max-consumers-per-subscription", "max_consumers_per_subscription", "consumers of each subscription")},
		{name: "max-subscriptions-per-topic", what: "limit of subscriptions per topic (0 = none)",
			fields: []string{"max_subscriptions_per_topic"}, fieldFlags: map[string]string{"max_subscriptions_per_topic": "--max-subscriptions-per-topic"},
			flags: limitFlag("max-subscriptions-per-topic", "max_subscriptions_per_topic", "subscriptions clients create on each topic")},
		{name: "max-topics-per-namespace", what: "limit of topics per namespace in this region (0 = none)",
			fields: []string{"max_topics_per_namespace"}, fieldFlags: map[string]string{"max_topics_per_namespace": "--max-topics-per-namespace"},
			flags: limitFlag("max-topics-per-namespace", "max_topics_per_namespace", "topics this region creates in the namespace")},
		{name: "auto-topic-creation", what: "automatic topic creation by producers, consumers and lookups",
			fields: []string{"allow_auto_topic_creation"},
			flags:  enableFlags("auto-topic-creation", "allow_auto_topic_creation"),
		},
		{name: "auto-subscription-creation", what: "automatic subscription creation by consumers",
			fields: []string{"allow_auto_subscription_creation"},
			flags:  enableFlags("auto-subscription-creation", "allow_auto_subscription_creation"),
		},
		{name: "deduplication", what: "producer deduplication",
			fields: []string{"deduplication_enabled"},
			flags:  enableFlags("deduplication", "deduplication_enabled"),
		},
		{name: "persistence", what: "persistence (ensemble, write and ack quorums of new ledgers)",
			fields: []string{"ensemble_size", "write_quorum", "ack_quorum"},
			flags: func(cmd *cobra.Command) func() (*clientv1.NamespacePolicies, []string, error) {
				var e, w, a int32
				cmd.Flags().Int32VarP(&e, "bookkeeper-ensemble", "e", 0, "ensemble size E (1..64)")
				cmd.Flags().Int32VarP(&w, "bookkeeper-write-quorum", "w", 0, "write quorum Qw (<= E)")
				cmd.Flags().Int32VarP(&a, "bookkeeper-ack-quorum", "a", 0, "ack quorum Qa (<= Qw)")
				return func() (*clientv1.NamespacePolicies, []string, error) {
					p, fields := &clientv1.NamespacePolicies{}, []string(nil)
					for _, q := range []struct {
						flag, field string
						v           int32
						dst         *int32
					}{{"bookkeeper-ensemble", "ensemble_size", e, &p.EnsembleSize},
						{"bookkeeper-write-quorum", "write_quorum", w, &p.WriteQuorum},
						{"bookkeeper-ack-quorum", "ack_quorum", a, &p.AckQuorum}} {
						if !cmd.Flags().Changed(q.flag) {
							continue
						}
						if q.v < 1 || q.v > 64 {
							return nil, nil, fmt.Errorf("--%s %d: must be in [1, 64]", q.flag, q.v)
						}
						*q.dst, fields = q.v, append(fields, q.field)
					}
					if len(fields) == 0 {
						return nil, nil, fmt.Errorf("set-persistence: give -e, -w and/or -a")
					}
					return p, fields, nil
				}
			}},
		{name: "delayed-delivery", what: "delayed delivery",
			fields: []string{"delayed_delivery_enabled"},
			flags:  enableFlags("delayed-delivery", "delayed_delivery_enabled"),
		},
		{name: "replication-lag-bound", what: "replication lag bound (max lag to remote regions, action past it)",
			fields:     []string{"max_replication_lag_ms", "max_replication_lag_action", "max_replication_lag_regions"},
			fieldFlags: map[string]string{"max_replication_lag_regions": "--regions", "max_replication_lag_ms": "--max-lag", "max_replication_lag_action": "--action"},
			flags: func(cmd *cobra.Command) func() (*clientv1.NamespacePolicies, []string, error) {
				var maxLag, action, regions string
				cmd.Flags().StringVar(&maxLag, "max-lag", "", "bound on the replication lag (age of the oldest message a region has not persisted): 500ms, 2s, 1m (required, > 0)")
				cmd.Flags().StringVar(&action, "action", "producer_hold", "past the bound: producer_error (sends fail at once) or producer_hold (sends wait)")
				cmd.Flags().StringVar(&regions, "regions", "", "remote regions the bound applies to, comma-separated (default: every replication region)")
				return func() (*clientv1.NamespacePolicies, []string, error) {
					if !cmd.Flags().Changed("max-lag") {
						return nil, nil, fmt.Errorf("set-replication-lag-bound: --max-lag is required (remove-replication-lag-bound removes the bound)")
					}
					d, err := parseDurationFlag("--max-lag", maxLag)
					if err != nil {
						return nil, nil, err
					}
					if d < time.Millisecond {
						return nil, nil, fmt.Errorf("--max-lag %q: must be at least 1ms (remove-replication-lag-bound removes the bound)", maxLag)
					}
					a, err := parseLagAction("--action", action)
					if err != nil {
						return nil, nil, err
					}
					p := &clientv1.NamespacePolicies{MaxReplicationLagMs: d.Milliseconds(), MaxReplicationLagAction: a}
					if regions != "" {
						p.MaxReplicationLagRegions = strings.Split(regions, ",")
					}
					return p, []string{"max_replication_lag_ms", "max_replication_lag_action", "max_replication_lag_regions"}, nil
				}
			}},
		{name: "replication-backlog-quota", what: "replication backlog quota (bytes not yet replicated to a region, action past it)",
			fields:     []string{"replication_backlog_quota_bytes", "replication_backlog_quota_action"},
			fieldFlags: map[string]string{"replication_backlog_quota_bytes": "--limit", "replication_backlog_quota_action": "--policy"},
			flags: func(cmd *cobra.Command) func() (*clientv1.NamespacePolicies, []string, error) {
				var limit, policy string
				cmd.Flags().StringVarP(&limit, "limit", "l", "", "replication backlog limit per region: 10K, 512M, 10G, bytes, or -1 (none)")
				cmd.Flags().StringVarP(&policy, "policy", "p", "", "action past the quota: producer_request_hold (producer_hold) or producer_exception (producer_error)")
				return func() (*clientv1.NamespacePolicies, []string, error) {
					p, fields := &clientv1.NamespacePolicies{}, []string(nil)
					f := cmd.Flags()
					if !f.Changed("limit") && !f.Changed("policy") {
						return nil, nil, fmt.Errorf("set-replication-backlog-quota: give --limit and/or --policy")
					}
					if f.Changed("limit") {
						n, err := parseSizeFlag("--limit", limit)
						if err != nil {
							return nil, nil, err
						}
						p.ReplicationBacklogQuotaBytes, fields = &n, append(fields, "replication_backlog_quota_bytes")
					}
					if f.Changed("policy") {
						a, err := parseLagAction("--policy", policy)
						if err != nil {
							return nil, nil, err
						}
						p.ReplicationBacklogQuotaAction, fields = a, append(fields, "replication_backlog_quota_action")
					}
					return p, fields, nil
				}
			}},
	}
}

// parseLagAction accepts the actions of the replication limits: hold or
// error, in Pulsar's names or ours (replication backlog is never evicted).
func parseLagAction(flag, s string) (clientv1.QuotaAction, error) {
	switch strings.ToLower(s) {
	case "producer_request_hold", "producer_hold", "hold":
		return clientv1.QuotaAction_QUOTA_ACTION_PRODUCER_HOLD, nil
	case "producer_exception", "producer_error", "error":
		return clientv1.QuotaAction_QUOTA_ACTION_PRODUCER_ERROR, nil
	}
	return 0, fmt.Errorf("%s %q: want producer_error or producer_hold (replication backlog is never evicted)", flag, s)
}

// flagError names the flag of the field a broker refusal is about.
func flagError(k policyKind, err error) error {
	for field, flag := range k.fieldFlags {
		if strings.Contains(err.Error(), field) {
			return fmt.Errorf("%s: %w", flag, err)
		}
	}
	return err
}

// limitFlag is the --NAME N flag of a limit policy (Pulsar's
// set-max-producers-per-topic and the like); 0 means no limit.
func limitFlag(name, field, what string) func(cmd *cobra.Command) func() (*clientv1.NamespacePolicies, []string, error) {
	return func(cmd *cobra.Command) func() (*clientv1.NamespacePolicies, []string, error) {
		var n int32
		cmd.Flags().Int32Var(&n, name, 0, "the most "+what+" (0 = no limit)")
		return func() (*clientv1.NamespacePolicies, []string, error) {
			if !cmd.Flags().Changed(name) {
				return nil, nil, fmt.Errorf("set-%s: --%s is required", name, name)
			}
			if n < 0 {
				return nil, nil, fmt.Errorf("--%s %d: must be >= 0 (0 = no limit)", name, n)
			}
			p := &clientv1.NamespacePolicies{}
			m := p.ProtoReflect()
			m.Set(m.Descriptor().Fields().ByName(protoreflect.Name(field)), protoreflect.ValueOfInt32(n))
			return p, []string{field}, nil
		}
	}
}

// enableFlags are the --enable/--disable flags of a boolean policy.
func enableFlags(name, field string) func(cmd *cobra.Command) func() (*clientv1.NamespacePolicies, []string, error) {
	return func(cmd *cobra.Command) func() (*clientv1.NamespacePolicies, []string, error) {
		var en, dis bool
		cmd.Flags().BoolVar(&en, "enable", false, "turn "+name+" on")
		cmd.Flags().BoolVar(&dis, "disable", false, "turn "+name+" off")
		return func() (*clientv1.NamespacePolicies, []string, error) {
			if en == dis {
				return nil, nil, fmt.Errorf("set-%s: give exactly one of --enable and --disable", name)
			}
			p := &clientv1.NamespacePolicies{}
			m := p.ProtoReflect()
			m.Set(m.Descriptor().Fields().ByName(protoreflect.Name(field)), protoreflect.ValueOfBool(en))
			return p, []string{field}, nil
		}
	}
}

// durationSeconds converts a parsed duration flag to whole seconds (-1 stays -1).
func durationSeconds(d time.Duration) int64 {
	if d < 0 {
		return -1
	}
	return int64(d / time.Second)
}

// parseQuotaPolicy accepts Pulsar's action names and ours.
func parseQuotaPolicy(s string) (clientv1.QuotaAction, error) {
	switch strings.ToLower(s) {
	case "producer_request_hold", "producer_hold", "hold":
		return clientv1.QuotaAction_QUOTA_ACTION_PRODUCER_HOLD, nil
	case "producer_exception", "producer_error", "error":
		return clientv1.QuotaAction_QUOTA_ACTION_PRODUCER_ERROR, nil
	case "consumer_backlog_eviction", "eviction":
		return clientv1.QuotaAction_QUOTA_ACTION_CONSUMER_BACKLOG_EVICTION, nil
	}
	return 0, fmt.Errorf("--policy %q: want producer_request_hold, producer_exception or consumer_backlog_eviction", s)
}

// policyLevel says what a command's argument names.
type policyLevel int

const (
	levelNamespace policyLevel = iota
	levelPrefix
	levelTopic
)

func (l policyLevel) String() string {
	return [...]string{"namespace", "prefix", "topic"}[l]
}

// topicLevel: a trailing '/' names a prefix, anything else a topic.
func topicLevel(arg string) policyLevel {
	if strings.HasSuffix(arg, "/") {
		return levelPrefix
	}
	return levelTopic
}

// copyPolicyFields sets the named fields of dst from src (cleared when src
// leaves them unset).
func copyPolicyFields(dst, src *clientv1.NamespacePolicies, fields []string) {
	d, s := dst.ProtoReflect(), src.ProtoReflect()
	for _, f := range fields {
		fd := d.Descriptor().Fields().ByName(protoreflect.Name(f))
		if s.Has(fd) {
			d.Set(fd, s.Get(fd))
		} else {
			d.Clear(fd)
		}
	}
}

// setPolicy writes a set-X at its level.
func setPolicy(ctx context.Context, a *client.Admin, level policyLevel, target string, p *clientv1.NamespacePolicies, fields []string) error {
	switch level {
	case levelNamespace:
		// Read-modify-write: the other fields stay as they are.
		cur, err := a.GetNamespacePolicies(ctx, target)
		if err != nil {
			return err
		}
		copyPolicyFields(cur, p, fields)
		return a.SetNamespacePolicies(ctx, target, cur)
	case levelPrefix:
		return a.SetPrefixPolicies(ctx, target, p, fields...)
	default:
		return a.SetTopicPolicies(ctx, target, p, fields...)
	}
}

// removePolicy undoes a set-X: a topic or prefix inherits again; a
// namespace gets the fields' zero values (no retention, no quota, no TTL,
// broker-default quorums, deduplication and delayed delivery on).
func removePolicy(ctx context.Context, a *client.Admin, level policyLevel, target string, fields []string) error {
	switch level {
	case levelNamespace:
		cur, err := a.GetNamespacePolicies(ctx, target)
		if err != nil {
			return err
		}
		copyPolicyFields(cur, &clientv1.NamespacePolicies{}, fields)
		return a.SetNamespacePolicies(ctx, target, cur)
	case levelPrefix:
		return a.RemovePrefixPolicies(ctx, target, fields...)
	default:
		return a.RemoveTopicPolicies(ctx, target, fields...)
	}
}

// getPolicy reads a get-X: the values the level sets (set = the fields it
// sets; a namespace sets all of them), or with applied the topic's
// effective values.
func getPolicy(ctx context.Context, a *client.Admin, level policyLevel, target string, applied bool) (p *clientv1.NamespacePolicies, set []string, err error) {
	switch {
	case level == levelNamespace:
		p, err = a.GetNamespacePolicies(ctx, target)
		return p, nil, err
	case applied && level == levelTopic:
		e, err := a.EffectivePolicies(ctx, target)
		return e.GetPolicies(), nil, err
	case applied:
		return nil, nil, fmt.Errorf("--applied: only for a topic (a prefix has no effective policies of its own)")
	case level == levelPrefix:
		parts := strings.SplitN(target, "/", 3)
		if len(parts) < 3 {
			return nil, nil, fmt.Errorf("prefix %q: want tenant/namespace/segment/", target)
		}
		ps, err := a.ListPrefixPolicies(ctx, parts[0]+"/"+parts[1])
		if err != nil {
			return nil, nil, err
		}
		for _, pp := range ps {
			if pp.GetPrefix() == target {
				return pp.GetPolicies(), pp.GetFields(), nil
			}
		}
		return &clientv1.NamespacePolicies{}, []string{}, nil
	default:
		p, set, err = a.GetTopicPolicies(ctx, target)
		if set == nil {
			set = []string{} // no override: every field inherits
		}
		return p, set, err
	}
}

// printPolicy prints the fields of one family: JSON numbers for numbers,
// enum names, null for a field the level leaves to inherit.
func printPolicy(out *adminOut, target string, level string, p *clientv1.NamespacePolicies, fields, set []string) {
	m := p.ProtoReflect()
	vals := map[string]any{}
	for _, f := range fields {
		fd := m.Descriptor().Fields().ByName(protoreflect.Name(f))
		switch {
		case set != nil && !contains(set, f):
			vals[f] = nil
		case fd.HasPresence() && !m.Has(fd):
			vals[f] = nil
		case fd.IsList():
			l := m.Get(fd).List()
			vs := make([]any, 0, l.Len())
			for i := 0; i < l.Len(); i++ {
				vs = append(vs, l.Get(i).Interface())
			}
			vals[f] = vs
		case fd.Kind() == protoreflect.EnumKind:
			vals[f] = string(fd.Enum().Values().ByNumber(m.Get(fd).Enum()).Name())
		default:
			vals[f] = m.Get(fd).Interface()
		}
	}
	if out.json {
		b, _ := json.Marshal(map[string]any{"target": target, "level": level, "policies": vals})
		fmt.Fprintln(out.w, string(b))
		return
	}
	keys := make([]string, 0, len(vals))
	for k := range vals {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if vals[k] == nil {
			fmt.Fprintf(out.w, "%s: (not set%s)\n", k, map[bool]string{true: ": inherits", false: ""}[level != "namespace"])
			continue
		}
		fmt.Fprintf(out.w, "%s: %v\n", k, vals[k])
	}
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// addPolicyCmds adds set-X/get-X/remove-X to `admin namespaces` (argument
// TENANT/NS) and `admin topics` (argument TOPIC, or PREFIX ending in '/'),
// plus `topics get-effective-policies` and `namespaces list-prefix-policies`.
func addPolicyCmds(o *adminOpts, namespaces, topics *cobra.Command) {
	for _, k := range policyKinds() {
		for _, g := range []struct {
			parent *cobra.Command
			arg    string
			level  func(string) policyLevel
			help   string
			remove string
		}{
			{namespaces, "TENANT/NS", func(string) policyLevel { return levelNamespace }, "the namespace's", " (back to the zero value: none / broker default)"},
			{topics, "TOPIC|PREFIX/", topicLevel, "a topic's override (or, with a trailing '/', a prefix's)", " (it inherits again)"},
		} {
			set := &cobra.Command{Use: "set-" + k.name + " " + g.arg, Short: "Set " + g.help + " " + k.what}
			build := k.flags(set)
			set.RunE = adminRun(o, 1, func(ctx context.Context, a *client.Admin, out *adminOut, args []string) error {
				p, fields, err := build()
				if err != nil {
					return err
				}
				lv := g.level(args[0])
				if err := setPolicy(ctx, a, lv, args[0], p, fields); err != nil {
					return flagError(k, err)
				}
				out.done("set "+k.name+" of "+lv.String(), args[0])
				return nil
			})
			var applied bool
			get := &cobra.Command{Use: "get-" + k.name + " " + g.arg, Short: "Show " + g.help + " " + k.what,
				RunE: adminRun(o, 1, func(ctx context.Context, a *client.Admin, out *adminOut, args []string) error {
					lv := g.level(args[0])
					p, setFields, err := getPolicy(ctx, a, lv, args[0], applied)
					if err != nil {
						return err
					}
					level := lv.String()
					if applied {
						level = "effective"
					}
					printPolicy(out, args[0], level, p, k.fields, setFields)
					return nil
				})}
			if g.parent == topics {
				get.Flags().BoolVar(&applied, "applied", false, "show the effective value (namespace, prefixes and topic resolved)")
			}
			if k.name == "backlog-quota" {
				get.Aliases = []string{"get-backlog-quotas"}
			}
			remove := &cobra.Command{Use: "remove-" + k.name + " " + g.arg, Short: "Remove " + g.help + " " + k.what + g.remove,
				RunE: adminRun(o, 1, func(ctx context.Context, a *client.Admin, out *adminOut, args []string) error {
					lv := g.level(args[0])
					if err := removePolicy(ctx, a, lv, args[0], k.fields); err != nil {
						return err
					}
					out.done("removed "+k.name+" of "+lv.String(), args[0])
					return nil
				})}
			g.parent.AddCommand(set, get, remove)
		}
	}
	topics.AddCommand(&cobra.Command{Use: "get-effective-policies TOPIC", Aliases: []string{"effective-policies"},
		Short: "Show the policies a topic runs with and where each comes from",
		RunE: adminRun(o, 1, func(ctx context.Context, a *client.Admin, out *adminOut, args []string) error {
			e, err := a.EffectivePolicies(ctx, args[0])
			if err == nil {
				out.message(e)
			}
			return err
		})})
	namespaces.AddCommand(&cobra.Command{Use: "list-prefix-policies TENANT/NS", Short: "List the prefix policies of a namespace",
		RunE: adminRun(o, 1, func(ctx context.Context, a *client.Admin, out *adminOut, args []string) error {
			ps, err := a.ListPrefixPolicies(ctx, args[0])
			if err == nil {
				out.message(&clientv1.ListPrefixPoliciesResponse{Prefixes: ps})
			}
			return err
		})})
}
