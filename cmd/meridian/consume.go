package main

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"time"
	"unicode/utf8"

	"github.com/meridianmq/meridian/client"
	"github.com/spf13/cobra"
)

type consumeFlags struct {
	url, topic, sub, typ, from, output, name string
	count, queue                             int
	idle, timeout                            time.Duration
	verbose, replicated                      bool
	fo                                       failoverFlags
	// Redelivery and dead-letter flags (--nack-every etc.).
	nackEvery, maxRedeliveries      int
	dlqTopic, ackTimeout, nackDelay string
	ackTimeoutDur, nackDelayDur     time.Duration
}

func newConsumeCmd() *cobra.Command {
	f := &consumeFlags{}
	cmd := &cobra.Command{
		Use:   "consume --topic T --subscription S [--type exclusive|shared|failover|key_shared] [--from earliest|latest|TIME|ID|origin:R:L:E] [--count N] [--nack-every N] [--max-redeliveries N [--dlq-topic T]] [--ack-timeout D] [--output text|json]",
		Short: "Receive and acknowledge messages of a subscription",
		Long: `Receive messages of a subscription, print them and acknowledge what was printed.

Exits after --count messages (0 = until interrupted, or until --idle passes
without a message: exit 0 when at least one message arrived, else 1). With --output json, one line per message:
{"id","key","payload" (or "payload_b64" when not UTF-8),"publish_time","producer","seq",
"origin_region","origin_id",...}: origin_region is the region where the message was
produced and origin_id ("L:E:B") its ID there (its own id when produced locally),
origin_seq its entry's number among that region's (the same in every region).

--from says where a NEW subscription starts (an existing one keeps its position):
earliest, latest, a message ID L:E of this region, origin:REGION:L:E (the message
produced in REGION at L:E, found in any region it was replicated to), an RFC 3339 time,
a relative time such as -10m, or @UNIX_MS. Times and origin positions are resolved per
origin region, so they select the same messages in every region.

To try redelivery by hand: --nack-every N negatively acknowledges every N-th
message received instead of acknowledging it (it comes back after --nack-delay,
with its redelivery_count raised); --ack-timeout D redelivers what is not
acknowledged within D. --max-redeliveries N sends a message delivered N times
already to the dead-letter topic (--dlq-topic, default TOPIC-SUBSCRIPTION-DLQ)
instead of printing it, and acknowledges it here.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runConsume(cmd, f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.url, "url", defaultURL, `broker gRPC address (host:port), or regions "a=HOST:P,b=HOST:P" (first = primary) for client failover`)
	addFailoverFlags(fl, &f.fo)
	fl.StringVar(&f.topic, "topic", "", "topic tenant/namespace/topic (required)")
	fl.StringVar(&f.sub, "subscription", "", "subscription name (required)")
	fl.StringVar(&f.typ, "type", "exclusive", "subscription type: exclusive, shared, failover or key_shared")
	fl.StringVar(&f.from, "from", "latest", "where a new subscription starts: earliest, latest, L:E, origin:REGION:L:E, RFC 3339 time, -DURATION or @UNIX_MS")
	fl.IntVar(&f.count, "count", 0, "exit after this many messages (0 = run until interrupted)")
	fl.StringVar(&f.output, "output", "text", "output format: text or json")
	fl.StringVar(&f.name, "consumer-name", "", "consumer name (default: assigned by the broker)")
	fl.IntVar(&f.queue, "receiver-queue", 1000, "entries buffered in the client (flow-control window)")
	fl.DurationVar(&f.idle, "idle", 0, "exit when no message arrives for this long (0 = wait forever): with 0 if at least one message arrived and --count is 0, else with an error")
	fl.DurationVar(&f.timeout, "connect-timeout", 10*time.Second, "connection timeout")
	fl.BoolVar(&f.verbose, "verbose", false, "debug logs on stderr")
	fl.IntVar(&f.nackEvery, "nack-every", 0, "negatively acknowledge every N-th message received instead of acknowledging it (0 = never)")
	fl.IntVar(&f.maxRedeliveries, "max-redeliveries", 0, "send a message delivered this many times already to the dead-letter topic (0 = no dead-letter topic)")
	fl.StringVar(&f.dlqTopic, "dlq-topic", "", "dead-letter topic (default TOPIC-SUBSCRIPTION-DLQ; needs --max-redeliveries)")
	fl.StringVar(&f.ackTimeout, "ack-timeout", "0", "redeliver a message not acknowledged within this time (0 = off; else at least 1s; e.g. 30s, 1m)")
	fl.StringVar(&f.nackDelay, "nack-delay", "1m", "delay before a negatively acknowledged message is redelivered (1ms to 24h)")
	fl.BoolVar(&f.replicated, "replicated", false, "create the subscription as a replicated subscription (its acknowledgements replicate to every region, so it can resume in another one)")
	return cmd
}

func init() { rootCmd.AddCommand(newConsumeCmd()) }

// consumedJSON is one --output json line.
type consumedJSON struct {
	ID          string  `json:"id"`
	Key         string  `json:"key"`
	Payload     *string `json:"payload,omitempty"`
	PayloadB64  *string `json:"payload_b64,omitempty"`
	PublishTime string  `json:"publish_time"`
	Producer    string  `json:"producer"`
	Seq         int64   `json:"seq"`
	// OriginRegion / OriginID name the message in the region where it
	// was produced (OriginID "L:E:B" is its ID there; equal to ID for a
	// message produced in this region).
	OriginRegion    string            `json:"origin_region"`
	OriginID        string            `json:"origin_id"`
	OriginSeq       int64             `json:"origin_seq,omitempty"`
	OriginInc       uint64            `json:"origin_incarnation,omitempty"`
	Properties      map[string]string `json:"properties,omitempty"`
	RedeliveryCount int32             `json:"redelivery_count,omitempty"`
	EventTime       string            `json:"event_time,omitempty"`
	// Partition is the message's partition, on a partitioned topic only.
	Partition *int32 `json:"partition,omitempty"`
}

func toConsumedJSON(m *client.ReceivedMessage) consumedJSON {
	j := consumedJSON{
		ID: m.ID.String(), Key: m.Key, Producer: m.ProducerName, Seq: m.SequenceID,
		OriginRegion: m.OriginRegion, OriginID: m.OriginID, OriginSeq: m.OriginSeq, OriginInc: m.OriginIncarnation, Properties: m.Properties, RedeliveryCount: m.RedeliveryCount,
	}
	if !m.PublishTime.IsZero() {
		j.PublishTime = m.PublishTime.UTC().Format(time.RFC3339Nano)
	}
	if !m.EventTime.IsZero() {
		j.EventTime = m.EventTime.UTC().Format(time.RFC3339Nano)
	}
	if utf8.Valid(m.Payload) {
		s := string(m.Payload)
		j.Payload = &s
	} else {
		s := base64.StdEncoding.EncodeToString(m.Payload)
		j.PayloadB64 = &s
	}
	return j
}

func (f *consumeFlags) validate() error {
	if err := checkOutput(f.output); err != nil {
		return err
	}
	if f.topic == "" {
		return errors.New("--topic is required (tenant/namespace/topic)")
	}
	if err := client.ValidateTopicName(f.topic); err != nil {
		return fmt.Errorf("--topic: %w", err)
	}
	if f.sub == "" {
		return errors.New("--subscription is required")
	}
	if _, err := client.ParseSubscriptionType(f.typ); err != nil {
		return fmt.Errorf("--type %q: want exclusive, shared, failover or key_shared", f.typ)
	}
	if _, err := client.ParseStartPosition(f.from, time.Now()); err != nil {
		return fmt.Errorf("--from: %w", err)
	}
	if f.count < 0 {
		return fmt.Errorf("--count %d: must be >= 0", f.count)
	}
	if f.queue < 1 || f.queue > client.MaxReceiverQueueSize {
		return fmt.Errorf("--receiver-queue %d: must be in [1, %d]", f.queue, client.MaxReceiverQueueSize)
	}
	if f.idle < 0 {
		return fmt.Errorf("--idle %v: must be >= 0", f.idle)
	}
	return f.validateRedelivery()
}

// validateRedelivery checks the nack, ack-timeout and dead-letter flags.
func (f *consumeFlags) validateRedelivery() error {
	if f.nackEvery < 0 {
		return fmt.Errorf("--nack-every %d: must be >= 0 (0 = never)", f.nackEvery)
	}
	if f.maxRedeliveries < 0 || f.maxRedeliveries > client.MaxDeadLetterRedeliveries {
		return fmt.Errorf("--max-redeliveries %d: must be in [0 (off), %d]", f.maxRedeliveries, client.MaxDeadLetterRedeliveries)
	}
	if f.dlqTopic != "" {
		if f.maxRedeliveries == 0 {
			return errors.New("--dlq-topic needs --max-redeliveries N (N >= 1)")
		}
		if err := client.ValidateTopicName(f.dlqTopic); err != nil {
			return fmt.Errorf("--dlq-topic: %w", err)
		}
		if f.dlqTopic == f.topic {
			return fmt.Errorf("--dlq-topic %q: must differ from --topic", f.dlqTopic)
		}
	}
	d, err := parseDurationFlag("--ack-timeout", f.ackTimeout)
	if err != nil {
		return err
	}
	if d != 0 && (d < client.MinAckTimeout || d > client.MaxAckTimeout) {
		return fmt.Errorf("--ack-timeout %q: want 0 (off) or a duration in [%v, %v]", f.ackTimeout, client.MinAckTimeout, client.MaxAckTimeout)
	}
	f.ackTimeoutDur = d
	nd, err := parseDurationFlag("--nack-delay", f.nackDelay)
	if err != nil {
		return err
	}
	if nd < time.Millisecond || nd > client.MaxNackRedeliveryDelay {
		return fmt.Errorf("--nack-delay %q: want a duration in [1ms, %v]", f.nackDelay, client.MaxNackRedeliveryDelay)
	}
	f.nackDelayDur = nd
	return nil
}

// deadLetter is the consumer's dead-letter policy (nil without
// --max-redeliveries).
func (f *consumeFlags) deadLetter() *client.DeadLetterPolicy {
	if f.maxRedeliveries == 0 {
		return nil
	}
	return &client.DeadLetterPolicy{MaxRedeliveries: int32(f.maxRedeliveries), Topic: f.dlqTopic}
}

func runConsume(cmd *cobra.Command, f *consumeFlags) error {
	if err := f.validate(); err != nil {
		return err
	}
	typ, _ := client.ParseSubscriptionType(f.typ)
	start, _ := client.ParseStartPosition(f.from, time.Now())
	from, initial := start.Initial()
	var startOpt *client.StartPosition
	if !initial {
		startOpt = &start
	}
	ctx, stop := signalContext(cmd.Context())
	defer stop()
	c, err := connectFailover(ctx, f.url, f.timeout, f.verbose, &f.fo)
	if err != nil {
		return err
	}
	defer closeQuietly(c)
	co, err := c.Subscribe(ctx, client.ConsumerOptions{
		Topic: f.topic, Subscription: f.sub, Type: typ, InitialPosition: from,
		Name: f.name, ReceiverQueueSize: f.queue, Start: startOpt, Replicated: f.replicated,
		NackRedeliveryDelay: f.nackDelayDur, AckTimeout: f.ackTimeoutDur, DeadLetter: f.deadLetter(),
	})
	if err != nil {
		return fmt.Errorf("subscribe %s on %s: %w", f.sub, f.topic, err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = co.Close(cctx)
	}()
	received := 0
	return printMessages(ctx, cmd.OutOrStdout(), printSpec{output: f.output, count: f.count, idle: f.idle, verb: "received", op: "receive", partitions: co.Partitions()},
		co.Receive, func(m *client.ReceivedMessage) error {
			received++
			if f.nackEvery > 0 && received%f.nackEvery == 0 {
				return co.Nack(ctx, m.ID)
			}
			if err := co.Ack(ctx, m.ID); err != nil {
				if ctx.Err() != nil {
					return errStopPrinting
				}
				return fmt.Errorf("ack %s: %w", m.ID, err)
			}
			return nil
		})
}

// printSpec is what printMessages needs of the consume and read flags.
type printSpec struct {
	output string
	count  int
	idle   time.Duration
	verb   string // "received", "read": for the --idle error
	op     string // "receive", "read": for a failed call
	// partitions is the topic's partition count (0: not partitioned).
	partitions int
}

// errStopPrinting ends printMessages without an error.
var errStopPrinting = errors.New("stop")

// printMessages prints the messages next returns (text or JSON lines)
// until count (0 = until interrupted, or quiet for idle after at least one
// message), calling after on each printed message.
func printMessages(ctx context.Context, w io.Writer, p printSpec, next func(context.Context) (*client.ReceivedMessage, error), after func(*client.ReceivedMessage) error) error {
	out := &lineWriter{w: w}
	n := 0
	for p.count == 0 || n < p.count {
		rctx, cancel := ctx, context.CancelFunc(func() {})
		if p.idle > 0 {
			rctx, cancel = context.WithTimeout(ctx, p.idle)
		}
		m, err := next(rctx)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				if p.count > 0 {
					return fmt.Errorf("interrupted after %d of %d messages", n, p.count)
				}
				return nil // interrupted: a normal end without --count
			}
			if errors.Is(err, context.DeadlineExceeded) {
				if n > 0 && p.count == 0 {
					return nil // the normal end of a drain: quiet for --idle
				}
				return fmt.Errorf("no message for --idle %v (%s %d)", p.idle, p.verb, n)
			}
			return fmt.Errorf("%s: %w", p.op, err)
		}
		if p.output == "json" {
			j := toConsumedJSON(m)
			j.Partition = partitionField(p.partitions, m.ID)
			out.json(j)
		} else {
			out.printf("%s key=%q %s\n", m.ID, m.Key, printable(m.Payload))
		}
		if after != nil {
			if err := after(m); err != nil {
				if errors.Is(err, errStopPrinting) {
					return nil
				}
				return err
			}
		}
		n++
	}
	return nil
}

// printable renders a payload for text output.
func printable(p []byte) string {
	if utf8.Valid(p) {
		return string(p)
	}
	return "base64:" + base64.StdEncoding.EncodeToString(p)
}
