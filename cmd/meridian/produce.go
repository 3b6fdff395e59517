package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/meridianmq/meridian/client"
	"github.com/spf13/cobra"
)

// ---- helpers shared by produce, consume, admin and perf ----

// defaultURL is the broker address the tools use without --url (the
// standalone default).
const defaultURL = "127.0.0.1:6650"

// checkOutput validates an --output value.
func checkOutput(v string) error {
	if v != "text" && v != "json" {
		return fmt.Errorf("--output %q: want text or json", v)
	}
	return nil
}

// signalContext is cancelled by SIGINT or SIGTERM.
func signalContext(parent context.Context) (context.Context, context.CancelFunc) {
	return signal.NotifyContext(parent, os.Interrupt, syscall.SIGTERM)
}

// toolLogger logs warnings and errors to stderr (verbose: debug).
func toolLogger(verbose bool) *slog.Logger {
	lvl := slog.LevelWarn
	if verbose {
		lvl = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}))
}

// connect opens a client on url, with a clear error when it is unreachable.
func connect(ctx context.Context, url string, timeout time.Duration, verbose bool) (*client.Client, error) {
	if url == "" {
		return nil, errors.New("--url is required (host:port of a broker)")
	}
	opts, err := withCLISecurity(client.Options{URL: url, ConnectTimeout: timeout, Logger: toolLogger(verbose)})
	if err != nil {
		return nil, err
	}
	c, err := client.New(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("--url %s: %w", url, err)
	}
	return c, nil
}

// closeQuietly closes c with a bounded context.
func closeQuietly(c *client.Client) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = c.Close(ctx)
}

// lineWriter serializes output lines from callbacks and goroutines.
type lineWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lineWriter) json(v any) {
	b, _ := json.Marshal(v)
	l.mu.Lock()
	defer l.mu.Unlock()
	_, _ = l.w.Write(append(b, '\n'))
}

func (l *lineWriter) printf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, _ = fmt.Fprintf(l.w, format, args...)
}

// pacer spaces events at rate per second (rate <= 0: no pacing).
type pacer struct {
	start time.Time
	rate  float64
	n     int64
}

func newPacer(rate float64) *pacer { return &pacer{start: time.Now(), rate: rate} }

// wait blocks until the next event is due or ctx ends.
func (p *pacer) wait(ctx context.Context) error {
	if p.rate <= 0 {
		return ctx.Err()
	}
	due := p.start.Add(time.Duration(float64(p.n) / p.rate * float64(time.Second)))
	p.n++
	if d := time.Until(due); d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return ctx.Err()
}

// stdinIsTerminal reports whether stdin is an interactive terminal (or
// another character device such as /dev/null): then produce generates
// payloads instead of reading lines.
func stdinIsTerminal() bool {
	fi, err := os.Stdin.Stat()
	if err != nil {
		return true
	}
	return fi.Mode()&os.ModeCharDevice != 0
}

// ---- produce ----

type produceFlags struct {
	url, topic, key, message, output, compression, name string
	count, size, keys, maxPending, batchMax             int
	rate                                                float64
	batchDelay, sendTimeout, timeout                    time.Duration
	verbose, noReplication                              bool
	replicateTo                                         []string
	fo                                                  failoverFlags
	// deliverAfter/deliverAt are the raw --deliver-after/--deliver-at
	// values; validate resolves them into deliverAfterD/deliverAtT.
	deliverAfter, deliverAt string
	deliverAfterD           time.Duration
	deliverAtT              time.Time
}

func newProduceCmd() *cobra.Command {
	f := &produceFlags{}
	cmd := &cobra.Command{
		Use:   "produce --topic T [--count N] [--size BYTES] [--key K | --keys N] [--rate R] [--message TEXT] [--deliver-after D | --deliver-at TIME] [--output text|json]",
		Short: "Publish messages to a topic",
		Long: `Publish messages to a topic.

The messages are --message TEXT (sent --count times, default 1); else the
lines of stdin when stdin is not a terminal (all lines, or the first --count);
else --count (default 1) generated payloads of --size bytes.
With --output json, one line per ACKNOWLEDGED message:
{"id":"L:E:B","seq":N,"key":"...","producer":"NAME","ack_time":"RFC3339Nano",
"origin_region":"REGION","origin_id":"L:E:B"} (origin: this region and the message's
ID here, the names other regions' consumers see it under).
--deliver-after D (10s, 5m, 1h, 7d, or a Go duration) or --deliver-at TIME
(RFC 3339, or Unix milliseconds) delays delivery to every subscription (delayed
delivery; the broker holds the messages until then, in every region).
--replicate-to a,b restricts geo-replication of the messages to those regions (each
one of the topic's replication regions); --no-replication keeps them in this region.
A message the broker had already stored (resent after a reconnect) is not stored
again: its line adds "duplicate":true, and "id" is where it was first stored, or
"-1:-1:-1" when the broker no longer knows.
A topic with no subscription in a namespace that retains nothing gets a
warning on stderr: its messages would be deleted.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runProduce(cmd, f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.url, "url", defaultURL, `broker gRPC address (host:port), or regions "a=HOST:P,b=HOST:P" (first = primary) for client failover`)
	addFailoverFlags(fl, &f.fo)
	fl.StringVar(&f.topic, "topic", "", "topic tenant/namespace/topic (required)")
	fl.IntVar(&f.count, "count", 0, "number of messages (default: 1, or every stdin line)")
	fl.IntVar(&f.size, "size", 100, "payload size in bytes of generated messages")
	fl.StringVar(&f.key, "key", "", "key of every message")
	fl.IntVar(&f.keys, "keys", 0, "cycle keys k0..k{N-1}")
	fl.Float64Var(&f.rate, "rate", 0, "messages per second (0 = as fast as possible)")
	fl.StringVar(&f.message, "message", "", "message text")
	fl.StringVar(&f.output, "output", "text", "output format: text or json")
	fl.StringVar(&f.compression, "compression", "none", "batch compression: none, zstd or s2")
	fl.StringVar(&f.name, "producer-name", "", "producer name (default: assigned by the broker)")
	fl.IntVar(&f.maxPending, "max-pending", 1000, "maximum unacknowledged messages in flight")
	fl.IntVar(&f.batchMax, "batch-max-messages", 1000, "maximum messages per batch")
	fl.DurationVar(&f.batchDelay, "batch-delay", 10*time.Millisecond, "maximum time a batch stays open")
	fl.DurationVar(&f.sendTimeout, "send-timeout", 30*time.Second, "fail a message not acknowledged within this time")
	fl.DurationVar(&f.timeout, "connect-timeout", 10*time.Second, "connection timeout")
	fl.BoolVar(&f.verbose, "verbose", false, "debug logs on stderr")
	fl.StringSliceVar(&f.replicateTo, "replicate-to", nil, "replicate the messages only to these regions (comma-separated, at most 16)")
	fl.BoolVar(&f.noReplication, "no-replication", false, "keep the messages in this region (no geo-replication)")
	fl.StringVar(&f.deliverAfter, "deliver-after", "", "deliver the messages this long after they are sent (10s, 5m, 1h, 7d, or a Go duration)")
	fl.StringVar(&f.deliverAt, "deliver-at", "", "deliver the messages at this time (RFC 3339, e.g. 2026-12-01T10:00:00Z, or Unix milliseconds)")
	return cmd
}

func init() { rootCmd.AddCommand(newProduceCmd()) }

// validate checks the flags, naming the flag and the limit.
func (f *produceFlags) validate() error {
	if err := checkOutput(f.output); err != nil {
		return err
	}
	if f.topic == "" {
		return errors.New("--topic is required (tenant/namespace/topic)")
	}
	if err := client.ValidateTopicName(f.topic); err != nil {
		return fmt.Errorf("--topic: %w", err)
	}
	if f.count < 0 {
		return fmt.Errorf("--count %d: must be >= 0", f.count)
	}
	if f.size < 0 || f.size > 5<<20 {
		return fmt.Errorf("--size %d: must be in [0, %d]", f.size, 5<<20)
	}
	if f.keys < 0 {
		return fmt.Errorf("--keys %d: must be >= 0", f.keys)
	}
	if f.keys > 0 && f.key != "" {
		return errors.New("--key and --keys are mutually exclusive")
	}
	if f.rate < 0 {
		return fmt.Errorf("--rate %v: must be >= 0", f.rate)
	}
	f.replicateTo = cleanRegions(f.replicateTo)
	if f.noReplication && len(f.replicateTo) > 0 {
		return errors.New("--replicate-to and --no-replication are mutually exclusive")
	}
	if len(f.replicateTo) > client.MaxReplicateTo {
		return fmt.Errorf("--replicate-to has %d regions, limit %d", len(f.replicateTo), client.MaxReplicateTo)
	}
	if err := f.validateDelivery(); err != nil {
		return err
	}
	return validateProducerFlags(f.maxPending, f.batchMax, f.batchDelay, f.compression)
}

// validateProducerFlags checks the producer flags that produce and perf share;
// the error names the flag and its limit.
func validateProducerFlags(maxPending, batchMax int, batchDelay time.Duration, compression string) error {
	if maxPending < 1 || maxPending > client.MaxMaxPendingMessages {
		return fmt.Errorf("--max-pending %d: must be in [1, %d]", maxPending, client.MaxMaxPendingMessages)
	}
	if batchMax < 1 || batchMax > client.MaxBatchingMaxMessages {
		return fmt.Errorf("--batch-max-messages %d: must be in [1, %d]", batchMax, client.MaxBatchingMaxMessages)
	}
	if batchDelay <= 0 {
		return fmt.Errorf("--batch-delay %v: must be > 0", batchDelay)
	}
	if _, err := client.ParseCompression(compression); err != nil {
		return fmt.Errorf("--compression %q: want none, zstd or s2", compression)
	}
	return nil
}

// messageSource yields the payloads to send.
type messageSource func() ([]byte, bool, error)

func (f *produceFlags) source() messageSource {
	n := 0
	switch {
	case f.message != "":
		limit := max(f.count, 1)
		return func() ([]byte, bool, error) {
			if n >= limit {
				return nil, false, nil
			}
			n++
			return []byte(f.message), true, nil
		}
	case !stdinIsTerminal():
		sc := bufio.NewScanner(os.Stdin)
		sc.Buffer(make([]byte, 64<<10), 5<<20)
		return func() ([]byte, bool, error) {
			if f.count > 0 && n >= f.count {
				return nil, false, nil
			}
			if !sc.Scan() {
				return nil, false, sc.Err()
			}
			n++
			return append([]byte(nil), sc.Bytes()...), true, nil
		}
	default:
		limit := max(f.count, 1)
		return func() ([]byte, bool, error) {
			if n >= limit {
				return nil, false, nil
			}
			p := generatedPayload(n, f.size)
			n++
			return p, true, nil
		}
	}
}

// generatedPayload is "message-<i> " padded with 'x' to size bytes (valid
// UTF-8, so consumers print it as text).
func generatedPayload(i, size int) []byte {
	p := []byte(fmt.Sprintf("message-%d ", i))
	if len(p) >= size {
		return p[:size]
	}
	return append(p, []byte(strings.Repeat("x", size-len(p)))...)
}

// produceRecord is one --output json line of produce.
type produceRecord struct {
	ID  string `json:"id"`
	Seq int64  `json:"seq"`
	Key string `json:"key"`
	// Producer is the producer's name; AckTime when the acknowledgement
	// arrived (RFC 3339, UTC).
	Producer string `json:"producer"`
	AckTime  string `json:"ack_time"`
	// Duplicate: the broker had already stored the message; ID is where it
	// was first stored ("-1:-1:-1" when the broker no longer knows).
	Duplicate bool `json:"duplicate,omitempty"`
	// OriginRegion / OriginID name the message everywhere: the region it
	// was produced in (this one) and its ID here.
	OriginRegion string `json:"origin_region"`
	OriginID     string `json:"origin_id"`
	// Partition is the message's partition, on a partitioned topic only.
	Partition *int32 `json:"partition,omitempty"`
}

func runProduce(cmd *cobra.Command, f *produceFlags) error {
	if err := f.validate(); err != nil {
		return err
	}
	comp, _ := client.ParseCompression(f.compression)
	ctx, stop := signalContext(cmd.Context())
	defer stop()
	c, err := connectFailover(ctx, f.url, f.timeout, f.verbose, &f.fo)
	if err != nil {
		return err
	}
	defer closeQuietly(c)
	p, err := c.NewProducer(ctx, client.ProducerOptions{
		Topic: f.topic, Name: f.name, Compression: comp,
		BatchingMaxMessages: f.batchMax, BatchingMaxDelay: f.batchDelay,
		SendTimeout: f.sendTimeout, MaxPendingMessages: f.maxPending, BlockIfQueueFull: true,
	})
	if err != nil {
		return fmt.Errorf("open producer on %s: %w", f.topic, err)
	}
	warnIfRetainsNothing(ctx, c, f.topic, cmd.ErrOrStderr())
	producerName, region := p.Name(), p.Region()
	out := &lineWriter{w: cmd.OutOrStdout()}
	var (
		mu       sync.Mutex
		acked    int
		failed   int
		firstErr error
	)
	next := f.source()
	pace := newPacer(f.rate)
	start := time.Now()
	sent := 0
	for {
		payload, ok, err := next()
		if err != nil {
			return fmt.Errorf("read stdin: %w", err)
		}
		if !ok || pace.wait(ctx) != nil {
			break
		}
		key := f.key
		if f.keys > 0 {
			key = fmt.Sprintf("k%d", sent%f.keys)
		}
		sent++
		p.SendAsync(ctx, &client.Message{Key: key, Payload: payload, ReplicateTo: f.replicateTo, DisableReplication: f.noReplication,
			DeliverAt: f.deliverAtT, DeliverAfter: f.deliverAfterD}, func(id client.MessageID, m *client.Message, err error) {
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				failed++
				if firstErr == nil {
					firstErr = err
				}
				return
			}
			acked++
			if f.output == "json" {
				out.json(produceRecord{ID: id.String(), Seq: m.SequenceID, Key: m.Key, Producer: producerName,
					AckTime: time.Now().UTC().Format(time.RFC3339Nano), Duplicate: m.Duplicate,
					OriginRegion: region, OriginID: id.String(), Partition: partitionField(p.Partitions(), id)})
			}
		})
	}
	cctx, cancel := context.WithTimeout(context.Background(), f.sendTimeout+5*time.Second)
	defer cancel()
	if err := p.Close(cctx); err != nil && firstErr == nil {
		firstErr = err
	}
	mu.Lock()
	defer mu.Unlock()
	if f.output == "text" {
		el := time.Since(start)
		out.printf("produced %d messages to %s in %v (%d failed)\n", acked, f.topic, el.Round(time.Millisecond), failed)
	}
	if firstErr != nil {
		return fmt.Errorf("%d of %d messages not acknowledged: %w", failed+(sent-acked-failed), sent, firstErr)
	}
	if ctx.Err() != nil && acked < sent {
		return fmt.Errorf("interrupted: %d of %d messages acknowledged", acked, sent)
	}
	return nil
}

// validateDelivery resolves --deliver-after and --deliver-at.
func (f *produceFlags) validateDelivery() error {
	if f.deliverAfter != "" && f.deliverAt != "" {
		return errors.New("--deliver-after and --deliver-at are mutually exclusive")
	}
	if f.deliverAfter != "" {
		d, err := parseDurationFlag("--deliver-after", f.deliverAfter)
		if err != nil {
			return err
		}
		if d < 0 {
			return fmt.Errorf("--deliver-after %q: must be >= 0", f.deliverAfter)
		}
		f.deliverAfterD = d
	}
	if f.deliverAt != "" {
		t, err := parseDeliverAt(f.deliverAt)
		if err != nil {
			return err
		}
		f.deliverAtT = t
	}
	if f.key != "" && len(f.key) > client.MaxKeyBytes {
		return fmt.Errorf("--key is %d bytes, limit %d", len(f.key), client.MaxKeyBytes)
	}
	return nil
}

// parseDeliverAt parses --deliver-at: RFC 3339 (with or without fractional
// seconds) or Unix milliseconds.
func parseDeliverAt(v string) (time.Time, error) {
	s := strings.TrimSpace(v)
	if ms, err := strconv.ParseInt(s, 10, 64); err == nil {
		if ms <= 0 {
			return time.Time{}, fmt.Errorf("--deliver-at %q: Unix milliseconds must be > 0", v)
		}
		return time.UnixMilli(ms), nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("--deliver-at %q: want an RFC 3339 time such as 2026-12-01T10:00:00Z, or Unix milliseconds", v)
	}
	if t.UnixMilli() <= 0 {
		return time.Time{}, fmt.Errorf("--deliver-at %q: must be after 1970-01-01T00:00:00Z", v)
	}
	return t, nil
}
