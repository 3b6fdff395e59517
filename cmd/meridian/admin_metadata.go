package main

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
	"github.com/meridianmq/meridian/metadata"
	"github.com/spf13/cobra"
)

// newMetadataAdminCmd is `meridian admin metadata`: who leads the metadata
// shards, and read-only access to the keys (through the broker's admin API).
func newMetadataAdminCmd(o *adminOpts) *cobra.Command {
	leaf := func(use, short string, nargs int, fn func(ctx context.Context, api clientv1.AdminClient, out *adminOut, args []string) error) *cobra.Command {
		return &cobra.Command{Use: use, Short: short, RunE: adminAPIRun(o, nargs, fn)}
	}
	var shard string
	shardFlag := func(c *cobra.Command) {
		c.Flags().StringVar(&shard, "shard", "regional", "metadata shard: regional (the broker's region) or global")
	}
	parseShard := func() (clientv1.MetadataShard, error) {
		switch shard {
		case "regional":
			return clientv1.MetadataShard_METADATA_SHARD_REGIONAL, nil
		case "global":
			return clientv1.MetadataShard_METADATA_SHARD_GLOBAL, nil
		}
		return 0, fmt.Errorf("--shard %q: want regional or global", shard)
	}

	var endpoints []string
	statusCmd := leaf("status", "Show who leads each metadata shard, in which term, as every metadata node sees it", 0,
		func(ctx context.Context, api clientv1.AdminClient, out *adminOut, _ []string) error {
			r, err := api.GetMetadataStatus(ctx, &clientv1.GetMetadataStatusRequest{})
			if err != nil {
				return err
			}
			return printMetadataStatus(out, r.GetNodes())
		})
	statusCmd.Flags().StringSliceVar(&endpoints, "metadata", nil,
		"ask these metadata nodes' gRPC addresses (host:port, comma-separated) directly instead of going through the broker at --url")
	brokerRun := statusCmd.RunE
	statusCmd.RunE = func(cmd *cobra.Command, args []string) error {
		if len(endpoints) == 0 {
			return brokerRun(cmd, args)
		}
		if err := checkOutput(o.output); err != nil {
			return err
		}
		if len(args) != 0 {
			return fmt.Errorf("%s: want 0 argument(s), got %d (usage: %s)", cmd.CommandPath(), len(args), cmd.UseLine())
		}
		return metadataStatusDirect(cmd, o, endpoints)
	}

	var limit int
	get := leaf("get KEY", "Show one metadata key (value as text when printable, else base64)", 1,
		func(ctx context.Context, api clientv1.AdminClient, out *adminOut, args []string) error {
			sh, err := parseShard()
			if err != nil {
				return err
			}
			kv, err := api.GetMetadataKey(ctx, &clientv1.GetMetadataKeyRequest{Shard: sh, Key: args[0]})
			if err != nil {
				return err
			}
			value, enc := displayValue(kv.GetValue())
			if out.json {
				(&lineWriter{w: out.w}).json(kvJSON(kv))
				return nil
			}
			fmt.Fprintf(out.w, "key: %s\nversion: %d\ncreate_revision: %d\nmod_revision: %d\nsession: %d\nencoding: %s\nvalue: %s\n",
				kv.GetKey(), kv.GetVersion(), kv.GetCreateRevision(), kv.GetModRevision(), kv.GetSession(), enc, value)
			return nil
		})
	shardFlag(get)
	list := leaf("list PREFIX", "List the metadata keys with a prefix, in key order (\"\" lists all)", 1,
		func(ctx context.Context, api clientv1.AdminClient, out *adminOut, args []string) error {
			sh, err := parseShard()
			if err != nil {
				return err
			}
			if limit < 1 || limit > 100000 {
				return fmt.Errorf("--limit %d: must be in [1, 100000]", limit)
			}
			lw := &lineWriter{w: out.w}
			after, n := "", 0
			for n < limit {
				r, err := api.ListMetadataKeys(ctx, &clientv1.ListMetadataKeysRequest{Shard: sh, Prefix: args[0], After: after,
					Limit: int32(min(limit-n, metadata.MaxPageLimit))})
				if err != nil {
					return err
				}
				for _, kv := range r.GetKvs() {
					n++
					if out.json {
						lw.json(kvJSON(kv))
						continue
					}
					// One line per key: multi-line text is quoted.
					value, enc := displayValue(kv.GetValue())
					switch {
					case enc == "base64":
						value = "base64:" + value
					case strings.ContainsAny(value, "\n\r"):
						value = strconv.Quote(value)
					}
					lw.printf("%s version=%d mod_revision=%d session=%d value=%s\n", kv.GetKey(), kv.GetVersion(), kv.GetModRevision(), kv.GetSession(), value)
				}
				if !r.GetMore() || len(r.GetKvs()) == 0 {
					return nil
				}
				after = r.GetKvs()[len(r.GetKvs())-1].GetKey()
			}
			fmt.Fprintf(os.Stderr, "meridian: listed %d keys; more follow after %q (raise --limit)\n", n, after)
			return nil
		})
	shardFlag(list)
	list.Flags().IntVar(&limit, "limit", 1000, "list at most this many keys (1..100000)")

	g := &cobra.Command{Use: "metadata", Short: "Metadata shards: leaders, and read-only keys", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return fmt.Errorf("admin metadata: missing action (%s)", subNames(cmd))
		}}
	g.AddCommand(statusCmd, get, list)
	return g
}

// metadataStatusDirect asks metadata nodes for their status over gRPC.
func metadataStatusDirect(cmd *cobra.Command, o *adminOpts, endpoints []string) error {
	ctx, stop := signalContext(cmd.Context())
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if o.verbose {
		log = toolLogger(true)
	}
	sec, err := cliRuntime()
	if err != nil {
		return err
	}
	defer sec.Close()
	cl, err := metadata.NewClient(ctx, endpoints, metadata.GlobalShard, metadata.WithLogger(log), metadata.WithRequestTimeout(o.timeout),
		metadata.WithDialOptions(sec.DialOptions("")...))
	if err != nil {
		return fmt.Errorf("--metadata: %w", err)
	}
	defer cl.Close()
	var nodes []*clientv1.MetadataNodeStatus
	for _, n := range cl.NodeStatuses(ctx) {
		pn := &clientv1.MetadataNodeStatus{Endpoint: n.Endpoint, Error: n.Error, NodeId: n.NodeID, RaftAddress: n.RaftAddress}
		for _, s := range n.Shards {
			pn.Shards = append(pn.Shards, &clientv1.MetadataShardStatus{Name: s.Name, ShardId: s.ShardID, LeaderId: s.LeaderID,
				LeaderAddress: s.LeaderAddress, Term: s.Term, IsLeader: s.IsLeader})
		}
		nodes = append(nodes, pn)
	}
	return printMetadataStatus(&adminOut{w: cmd.OutOrStdout(), json: o.output == "json"}, nodes)
}

// printMetadataStatus prints one line per node and shard (or per node that
// could not be asked). It fails only when no node answered.
func printMetadataStatus(out *adminOut, nodes []*clientv1.MetadataNodeStatus) error {
	lw := &lineWriter{w: out.w}
	answered := 0
	var firstErr string
	for _, n := range nodes {
		if n.GetError() != "" {
			if firstErr == "" {
				firstErr = n.GetEndpoint() + ": " + n.GetError()
			}
			if out.json {
				lw.json(map[string]any{"endpoint": n.GetEndpoint(), "error": n.GetError()})
			} else {
				lw.printf("node endpoint=%s error=%q\n", n.GetEndpoint(), n.GetError())
			}
			continue
		}
		answered++
		for _, s := range n.GetShards() {
			if out.json {
				lw.json(map[string]any{"node_id": n.GetNodeId(), "endpoint": n.GetEndpoint(), "raft_address": n.GetRaftAddress(),
					"shard": s.GetName(), "shard_id": s.GetShardId(), "leader_id": s.GetLeaderId(), "leader_address": s.GetLeaderAddress(),
					"term": s.GetTerm(), "is_leader": s.GetIsLeader()})
				continue
			}
			leader := "none"
			if s.GetLeaderId() != 0 {
				leader = fmt.Sprintf("%d (%s)", s.GetLeaderId(), s.GetLeaderAddress())
			}
			role := "is a follower"
			switch {
			case s.GetIsLeader():
				role = "is the leader"
			case s.GetLeaderId() == 0:
				role = "knows no leader"
			}
			lw.printf("shard %s: leader %s, term %d; node %d (%s) %s\n", s.GetName(), leader, s.GetTerm(), n.GetNodeId(), n.GetRaftAddress(), role)
		}
	}
	if answered == 0 {
		if firstErr == "" {
			return errors.New("no metadata node reported its status")
		}
		return fmt.Errorf("no metadata node answered: %s", firstErr)
	}
	return nil
}

// displayValue returns a value as text when it is valid UTF-8 without
// control characters other than tab and newline, else as base64.
func displayValue(v []byte) (string, string) {
	if utf8.Valid(v) && !strings.ContainsFunc(string(v), func(r rune) bool {
		return !unicode.IsPrint(r) && r != '\t' && r != '\n' && r != '\r'
	}) {
		return string(v), "text"
	}
	return base64.StdEncoding.EncodeToString(v), "base64"
}

func kvJSON(kv *clientv1.MetadataKeyValue) map[string]any {
	value, enc := displayValue(kv.GetValue())
	return map[string]any{"key": kv.GetKey(), "value": value, "encoding": enc, "version": kv.GetVersion(),
		"create_revision": kv.GetCreateRevision(), "mod_revision": kv.GetModRevision(), "session": kv.GetSession()}
}

// newLedgersAdminCmd is `meridian admin ledgers`: a ledger's metadata, and
// a topic's ledgers in order.
func newLedgersAdminCmd(o *adminOpts) *cobra.Command {
	leaf := func(use, short string, nargs int, fn func(ctx context.Context, api clientv1.AdminClient, out *adminOut, args []string) error) *cobra.Command {
		return &cobra.Command{Use: use, Short: short, RunE: adminAPIRun(o, nargs, fn)}
	}
	get := leaf("get ID", "Show a ledger: state, quorums, ensembles by segment, last entry, length", 1,
		func(ctx context.Context, api clientv1.AdminClient, out *adminOut, args []string) error {
			id, err := strconv.ParseInt(args[0], 10, 64)
			if err != nil || id < 0 {
				return fmt.Errorf("ID %q: want a ledger ID (a non-negative integer)", args[0])
			}
			d, err := api.GetLedger(ctx, &clientv1.GetLedgerRequest{LedgerId: id})
			if err != nil {
				return err
			}
			if out.json {
				(&lineWriter{w: out.w}).json(ledgerJSON(d, false))
				return nil
			}
			printLedger(out.w, d, false)
			return nil
		})
	var topic string
	list := leaf("list --topic TOPIC", "List a topic's ledgers in order, with their state and ensembles", 0,
		func(ctx context.Context, api clientv1.AdminClient, out *adminOut, _ []string) error {
			if topic == "" {
				return errors.New("--topic is required (tenant/namespace/topic)")
			}
			r, err := api.ListTopicLedgers(ctx, &clientv1.ListTopicLedgersRequest{Topic: topic})
			if err != nil {
				return err
			}
			lw := &lineWriter{w: out.w}
			for _, d := range r.GetLedgers() {
				if out.json {
					lw.json(ledgerJSON(d, true))
					continue
				}
				printLedger(out.w, d, true)
			}
			return nil
		})
	list.Flags().StringVar(&topic, "topic", "", "topic (tenant/namespace/topic), required")
	g := &cobra.Command{Use: "ledgers", Short: "Ledgers: state, quorums, ensembles", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return fmt.Errorf("admin ledgers: missing action (%s)", subNames(cmd))
		}}
	g.AddCommand(get, list)
	return g
}

func ledgerJSON(d *clientv1.LedgerDetails, topic bool) map[string]any {
	segs := []map[string]any{}
	for _, s := range d.GetSegments() {
		ens := []map[string]any{}
		for _, b := range s.GetEnsemble() {
			ens = append(ens, map[string]any{"bookie_id": b.GetBookieId(), "address": b.GetAddress(), "rack": b.GetRack()})
		}
		segs = append(segs, map[string]any{"first_entry": s.GetFirstEntry(), "last_entry": s.GetLastEntry(), "ensemble": ens})
	}
	props := d.GetProperties()
	if props == nil {
		props = map[string]string{}
	}
	m := map[string]any{"ledger_id": d.GetLedgerId(), "state": d.GetState(), "ensemble_size": d.GetEnsembleSize(),
		"write_quorum": d.GetWriteQuorum(), "ack_quorum": d.GetAckQuorum(), "last_entry": d.GetLastEntry(), "length": d.GetLength(),
		"created_unix_ms": d.GetCreatedUnixMs(), "version": d.GetVersion(), "properties": props, "segments": segs}
	if topic {
		m["topic_seq"], m["topic_entries"], m["topic_size_bytes"] = d.GetTopicSeq(), d.GetTopicEntries(), d.GetTopicSizeBytes()
	}
	return m
}

func printLedger(w io.Writer, d *clientv1.LedgerDetails, topic bool) {
	prefix := ""
	if topic {
		prefix = fmt.Sprintf("seq=%d entries=%d size=%d ", d.GetTopicSeq(), d.GetTopicEntries(), d.GetTopicSizeBytes())
	}
	created := "-"
	if d.GetCreatedUnixMs() > 0 {
		created = time.UnixMilli(d.GetCreatedUnixMs()).UTC().Format(time.RFC3339)
	}
	fmt.Fprintf(w, "%sledger %d state=%s E=%d Qw=%d Qa=%d last_entry=%d length=%d created=%s version=%d\n", prefix,
		d.GetLedgerId(), d.GetState(), d.GetEnsembleSize(), d.GetWriteQuorum(), d.GetAckQuorum(), d.GetLastEntry(), d.GetLength(), created, d.GetVersion())
	for _, s := range d.GetSegments() {
		last := "open"
		if s.GetLastEntry() >= 0 || d.GetState() == "closed" {
			last = strconv.FormatInt(s.GetLastEntry(), 10)
		}
		var ens []string
		for _, b := range s.GetEnsemble() {
			e := b.GetBookieId() + "@" + b.GetAddress()
			if b.GetRack() != "" {
				e += "/" + b.GetRack()
			}
			ens = append(ens, e)
		}
		fmt.Fprintf(w, "  entries %d..%s: %s\n", s.GetFirstEntry(), last, strings.Join(ens, " "))
	}
	if len(d.GetProperties()) > 0 {
		keys := make([]string, 0, len(d.GetProperties()))
		for k := range d.GetProperties() {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		var kv []string
		for _, k := range keys {
			kv = append(kv, k+"="+d.GetProperties()[k])
		}
		fmt.Fprintf(w, "  properties: %s\n", strings.Join(kv, " "))
	}
}
