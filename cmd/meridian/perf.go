package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/meridianmq/meridian/client"
	"github.com/spf13/cobra"
)

type perfFlags struct {
	url, topic, output, compression, sub, typ string
	rate                                      float64
	size, producers, maxPending, batchMax     int
	duration, batchDelay, timeout, drain      time.Duration
	verbose                                   bool
}

// perfSummary is the --output json summary line.
type perfSummary struct {
	Messages   int64   `json:"messages"`
	MsgsPerSec float64 `json:"msgs_per_sec"`
	MBPerSec   float64 `json:"mb_per_sec"`
	P50Ms      float64 `json:"p50_ms"`
	P99Ms      float64 `json:"p99_ms"`
	P999Ms     float64 `json:"p999_ms"`
	MaxMs      float64 `json:"max_ms"`
	Errors     int64   `json:"errors"`
	Duplicates int64   `json:"duplicates,omitempty"`
	// CPUPressurePct is the share of the run during which some runnable
	// task on the machine waited for a CPU (Linux PSI; -1 unknown).
	CPUPressurePct float64 `json:"cpu_pressure_pct"`
	// SchedP99Ms is the p99 goroutine scheduling latency of this perf
	// process (runnable to running).
	SchedP99Ms float64 `json:"sched_p99_ms"`
}

// perfStats collects latencies (microseconds) in HDR histograms: one for
// the whole run and one per progress interval. Range 1µs..120s at 3
// significant digits covers loopback (sub-ms) up to send timeouts.
type perfStats struct {
	mu       sync.Mutex
	total    *hdrhistogram.Histogram
	interval *hdrhistogram.Histogram
	msgs     int64
	bytes    int64
	iMsgs    int64
	iBytes   int64
	errs     atomic.Int64
	start    time.Time
	last     time.Time // time of the last record
	onRecord func()    // optional, called on every record
	load     *loadProbe
}

func newPerfStats() *perfStats {
	return &perfStats{
		total:    hdrhistogram.New(1, 120_000_000, 3),
		interval: hdrhistogram.New(1, 120_000_000, 3),
		start:    time.Now(),
		load:     newLoadProbe(),
	}
}

func (s *perfStats) record(lat time.Duration, size int) {
	us := max(lat.Microseconds(), 1)
	s.mu.Lock()
	_ = s.total.RecordValue(us)
	_ = s.interval.RecordValue(us)
	s.msgs++
	s.bytes += int64(size)
	s.iMsgs++
	s.iBytes += int64(size)
	s.last = time.Now()
	s.mu.Unlock()
	if s.onRecord != nil {
		s.onRecord()
	}
}

func ms(us int64) float64 { return float64(us) / 1000 }

// progress prints one line per second until ctx ends.
func (s *perfStats) progress(ctx context.Context, w io.Writer, what string) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	last := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			s.mu.Lock()
			el := now.Sub(last).Seconds()
			last = now
			n, b := s.iMsgs, s.iBytes
			p50, p99 := s.interval.ValueAtQuantile(50), s.interval.ValueAtQuantile(99)
			s.interval.Reset()
			s.iMsgs, s.iBytes = 0, 0
			s.mu.Unlock()
			fmt.Fprintf(w, "[%s %4.0fs] %9.0f msg/s %8.2f MB/s  p50 %7.2f ms  p99 %7.2f ms  errors %d\n",
				what, now.Sub(s.start).Seconds(), float64(n)/el, float64(b)/el/1e6, ms(p50), ms(p99), s.errs.Load())
		}
	}
}

// summary covers start..last record (a drained tail or idle end does not
// dilute the rate); elapsed is used when nothing was recorded.
func (s *perfStats) summary(elapsed time.Duration) perfSummary {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.last.IsZero() {
		elapsed = s.last.Sub(s.start)
	}
	sec := max(elapsed.Seconds(), 1e-9)
	return perfSummary{
		Messages:   s.msgs,
		MsgsPerSec: float64(s.msgs) / sec,
		MBPerSec:   float64(s.bytes) / sec / 1e6,
		P50Ms:      ms(s.total.ValueAtQuantile(50)),
		P99Ms:      ms(s.total.ValueAtQuantile(99)),
		P999Ms:     ms(s.total.ValueAtQuantile(99.9)),
		MaxMs:      ms(s.total.Max()),
		Errors:     s.errs.Load(),

		CPUPressurePct: s.load.cpuPressurePct(),
		SchedP99Ms:     schedLatencyQuantileMs(0.99),
	}
}

func (f *perfFlags) validate(needRate bool) error {
	if err := checkOutput(f.output); err != nil {
		return err
	}
	if f.topic == "" {
		return errors.New("--topic is required (tenant/namespace/topic)")
	}
	if err := client.ValidateTopicName(f.topic); err != nil {
		return fmt.Errorf("--topic: %w", err)
	}
	if f.duration <= 0 {
		return fmt.Errorf("--duration %v: must be > 0", f.duration)
	}
	if needRate {
		if f.rate < 0 {
			return fmt.Errorf("--rate %v: must be >= 0 (0 = as fast as possible)", f.rate)
		}
		if f.size < 8 || f.size > 4<<20 {
			return fmt.Errorf("--size %d: must be in [8, %d] (the first 8 bytes carry the send time)", f.size, 4<<20)
		}
		if f.producers < 1 || f.producers > 256 {
			return fmt.Errorf("--producers %d: must be in [1, 256]", f.producers)
		}
		if err := validateProducerFlags(f.maxPending, f.batchMax, f.batchDelay, f.compression); err != nil {
			return err
		}
	}
	if _, err := client.ParseSubscriptionType(f.typ); err != nil {
		return fmt.Errorf("--type %q: want exclusive, shared, failover or key_shared", f.typ)
	}
	return nil
}

func newPerfCmd() *cobra.Command {
	f := &perfFlags{}
	root := &cobra.Command{
		Use:   "perf produce|consume|e2e",
		Short: "Measure throughput and latency",
		Long: `Measure throughput and latency against a running region.

  perf produce   publish for --duration; latency = send to acknowledgement
  perf consume   receive for --duration; latency = publish time to receipt
  perf e2e       publish and consume together; latency = send to receipt

A progress line every second, then a summary with p50/p99/p99.9/max from an
HDR histogram. With --output json the summary is one JSON line on stdout
(progress goes to stderr).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return errors.New("perf: missing mode (produce, consume or e2e)")
		},
	}
	pf := root.PersistentFlags()
	pf.StringVar(&f.url, "url", defaultURL, "broker gRPC address (host:port)")
	pf.StringVar(&f.topic, "topic", "", "topic tenant/namespace/topic (required)")
	pf.Float64Var(&f.rate, "rate", 0, "total messages per second over all producers (0 = as fast as possible)")
	pf.IntVar(&f.size, "size", 1024, "message size in bytes")
	pf.DurationVar(&f.duration, "duration", 10*time.Second, "how long to run")
	pf.IntVar(&f.producers, "producers", 1, "number of producers")
	pf.StringVar(&f.output, "output", "text", "output format: text or json")
	pf.StringVar(&f.compression, "compression", "none", "batch compression: none, zstd or s2")
	pf.IntVar(&f.maxPending, "max-pending", 1000, "maximum unacknowledged messages per producer")
	pf.IntVar(&f.batchMax, "batch-max-messages", 1000, "maximum messages per batch")
	pf.DurationVar(&f.batchDelay, "batch-delay", time.Millisecond, "maximum time a batch stays open")
	pf.StringVar(&f.sub, "subscription", "", "subscription for consume/e2e (default: a new unique one)")
	pf.StringVar(&f.typ, "type", "exclusive", "subscription type for consume/e2e")
	pf.DurationVar(&f.drain, "drain", 10*time.Second, "e2e: how long to wait for the tail after producers stop")
	pf.DurationVar(&f.timeout, "connect-timeout", 10*time.Second, "connection timeout")
	pf.BoolVar(&f.verbose, "verbose", false, "debug logs on stderr")

	mode := func(name, short string, run func(context.Context, *cobra.Command, *client.Client, *perfFlags) error, needRate bool) *cobra.Command {
		return &cobra.Command{Use: name, Short: short, Args: cobra.NoArgs, RunE: func(cmd *cobra.Command, _ []string) error {
			if err := f.validate(needRate); err != nil {
				return err
			}
			ctx, stop := signalContext(cmd.Context())
			defer stop()
			c, err := connect(ctx, f.url, f.timeout, f.verbose)
			if err != nil {
				return err
			}
			defer closeQuietly(c)
			return run(ctx, cmd, c, f)
		}}
	}
	root.AddCommand(
		mode("produce", "Publish as fast as allowed and measure acknowledgement latency", perfProduce, true),
		mode("consume", "Consume and measure publish-to-receive latency", perfConsume, false),
		mode("e2e", "Publish and consume together and measure end-to-end latency", perfE2E, true),
	)
	return root
}

func init() { rootCmd.AddCommand(newPerfCmd()) }

// progressWriter is stdout for text output, stderr for json (stdout then
// carries only the summary line).
func progressWriter(cmd *cobra.Command, f *perfFlags) io.Writer {
	if f.output == "json" {
		return os.Stderr
	}
	return cmd.OutOrStdout()
}

func printSummary(cmd *cobra.Command, f *perfFlags, what string, s perfSummary) {
	if f.output == "json" {
		(&lineWriter{w: cmd.OutOrStdout()}).json(s)
		return
	}
	fmt.Fprintf(cmd.OutOrStdout(), "%s summary: %d messages, %.0f msg/s, %.2f MB/s, latency p50 %.2f ms, p99 %.2f ms, p99.9 %.2f ms, max %.2f ms, %d errors",
		what, s.Messages, s.MsgsPerSec, s.MBPerSec, s.P50Ms, s.P99Ms, s.P999Ms, s.MaxMs, s.Errors)
	if s.Duplicates > 0 {
		fmt.Fprintf(cmd.OutOrStdout(), ", %d duplicate batches", s.Duplicates)
	}
	if s.CPUPressurePct >= 0 {
		fmt.Fprintf(cmd.OutOrStdout(), "; machine CPU pressure %.1f%%", s.CPUPressurePct)
	}
	fmt.Fprintf(cmd.OutOrStdout(), ", perf scheduling latency p99 %.2f ms", s.SchedP99Ms)
	fmt.Fprintln(cmd.OutOrStdout())
}

// runProducers publishes for f.duration with f.producers producers and
// records ack latency in st. It returns the number of
// duplicate batches reported by the broker.
func runProducers(ctx context.Context, c *client.Client, f *perfFlags, st *perfStats) (int64, error) {
	comp, _ := client.ParseCompression(f.compression)
	prods := make([]*client.Producer, f.producers)
	for i := range prods {
		p, err := c.NewProducer(ctx, client.ProducerOptions{
			Topic: f.topic, Compression: comp, BatchingMaxMessages: f.batchMax, BatchingMaxDelay: f.batchDelay,
			MaxPendingMessages: f.maxPending, BlockIfQueueFull: true,
		})
		if err != nil {
			return 0, fmt.Errorf("open producer on %s: %w", f.topic, err)
		}
		prods[i] = p
	}
	rctx, cancel := context.WithTimeout(ctx, f.duration)
	defer cancel()
	// Payloads are recycled once their send is resolved (the client copies
	// a payload into its batch, and hands the message back only to the
	// callback): the harness's own garbage otherwise drives a GC cycle
	// every few tens of milliseconds at high rates and its pauses show up
	// in the latency it measures.
	payloads := sync.Pool{New: func() any { return &client.Message{Payload: make([]byte, f.size)} }}
	var wg sync.WaitGroup
	for _, p := range prods {
		wg.Go(func() {
			pace := newPacer(f.rate / float64(f.producers))
			for pace.wait(rctx) == nil {
				m := payloads.Get().(*client.Message)
				*m = client.Message{Payload: m.Payload}
				sent := time.Now()
				binary.BigEndian.PutUint64(m.Payload, uint64(sent.UnixNano()))
				p.SendAsync(rctx, m, func(_ client.MessageID, m *client.Message, err error) {
					if m != nil {
						defer payloads.Put(m)
					}
					if err != nil {
						if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
							st.errs.Add(1)
						}
						return
					}
					st.record(time.Since(sent), f.size)
				})
			}
		})
	}
	wg.Wait()
	var dups int64
	for _, p := range prods {
		cctx, ccancel := context.WithTimeout(context.Background(), 30*time.Second)
		_ = p.Close(cctx)
		ccancel()
		dups += p.Stats().Duplicates
	}
	return dups, nil
}

func perfProduce(ctx context.Context, cmd *cobra.Command, c *client.Client, f *perfFlags) error {
	st := newPerfStats()
	pctx, stop := context.WithCancel(ctx)
	go st.progress(pctx, progressWriter(cmd, f), "produce")
	dups, err := runProducers(ctx, c, f, st)
	stop()
	if err != nil {
		return err
	}
	s := st.summary(time.Since(st.start))
	s.Duplicates = dups
	printSummary(cmd, f, "produce", s)
	return nil
}

func perfSubscribe(ctx context.Context, c *client.Client, f *perfFlags, from client.InitialPosition) (*client.Consumer, error) {
	typ, _ := client.ParseSubscriptionType(f.typ)
	sub := f.sub
	if sub == "" {
		sub = fmt.Sprintf("perf-%d", time.Now().UnixNano())
	}
	co, err := c.Subscribe(ctx, client.ConsumerOptions{Topic: f.topic, Subscription: sub, Type: typ, InitialPosition: from, ReceiverQueueSize: perfReceiverQueue})
	if err != nil {
		return nil, fmt.Errorf("subscribe %s on %s: %w", sub, f.topic, err)
	}
	return co, nil
}

// consumeLoop receives until ctx ends, recording latency from lat, and
// acknowledges on a separate goroutine (an entry's ack waits one round trip).
func consumeLoop(ctx context.Context, co *client.Consumer, st *perfStats, lat func(*client.ReceivedMessage, time.Time) time.Duration, until func() bool) {
	acks := make(chan client.MessageID, 10_000)
	var wg sync.WaitGroup
	wg.Go(func() {
		for id := range acks {
			actx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			if err := co.Ack(actx, id); err != nil {
				st.errs.Add(1)
			}
			cancel()
		}
	})
	for !until() {
		// Short receives so that until() is checked while idle.
		rctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		m, err := co.Receive(rctx)
		cancel()
		if err != nil {
			if ctx.Err() != nil || !errors.Is(err, context.DeadlineExceeded) {
				break
			}
			continue
		}
		st.record(lat(m, time.Now()), len(m.Payload))
		acks <- m.ID
	}
	close(acks)
	wg.Wait()
}

func perfConsume(ctx context.Context, cmd *cobra.Command, c *client.Client, f *perfFlags) error {
	co, err := perfSubscribe(ctx, c, f, client.Earliest)
	if err != nil {
		return err
	}
	defer func() { _ = co.Close(context.Background()) }()
	st := newPerfStats()
	rctx, cancel := context.WithTimeout(ctx, f.duration)
	defer cancel()
	go st.progress(rctx, progressWriter(cmd, f), "consume")
	consumeLoop(rctx, co, st, func(m *client.ReceivedMessage, now time.Time) time.Duration {
		return now.Sub(m.PublishTime)
	}, func() bool { return false })
	printSummary(cmd, f, "consume", st.summary(time.Since(st.start)))
	return nil
}

func perfE2E(ctx context.Context, cmd *cobra.Command, c *client.Client, f *perfFlags) error {
	// Subscribe first (from latest) so every message produced is received.
	co, err := perfSubscribe(ctx, c, f, client.Latest)
	if err != nil {
		return err
	}
	defer func() { _ = co.Close(context.Background()) }()
	st := newPerfStats()
	prodErrs := &perfStats{} // producer side: errors only
	pctx, stopProgress := context.WithCancel(ctx)
	go st.progress(pctx, progressWriter(cmd, f), "e2e")

	var produced atomic.Int64
	var dups int64
	var perr error
	prodDone := make(chan struct{})
	go func() {
		defer close(prodDone)
		dups, perr = runProducers(ctx, c, f, countingStats(prodErrs, &produced))
	}()
	cctx, ccancel := context.WithCancel(ctx)
	defer ccancel()
	go func() {
		// Stop consuming once producers are done and the tail has had
		// --drain to arrive.
		<-prodDone
		select {
		case <-time.After(f.drain):
		case <-ctx.Done():
		}
		ccancel()
	}()
	var received atomic.Int64
	consumeLoop(cctx, co, st, func(m *client.ReceivedMessage, now time.Time) time.Duration {
		received.Add(1)
		if len(m.Payload) < 8 {
			return 0
		}
		return now.Sub(time.Unix(0, int64(binary.BigEndian.Uint64(m.Payload))))
	}, func() bool {
		select {
		case <-prodDone:
			return received.Load() >= produced.Load()
		default:
			return false
		}
	})
	stopProgress()
	<-prodDone
	if perr != nil {
		return perr
	}
	s := st.summary(time.Since(st.start))
	s.Errors += prodErrs.errs.Load()
	s.Duplicates = dups
	printSummary(cmd, f, "e2e", s)
	if f.output == "text" {
		fmt.Fprintf(cmd.OutOrStdout(), "e2e: %d acknowledged, %d received\n", produced.Load(), received.Load())
	}
	return nil
}

// countingStats returns a stats sink for producers that only counts
// acknowledged messages (and errors) without a histogram.
func countingStats(st *perfStats, acked *atomic.Int64) *perfStats {
	st.total = hdrhistogram.New(1, 120_000_000, 1)
	st.interval = hdrhistogram.New(1, 120_000_000, 1)
	st.onRecord = func() { acked.Add(1) }
	return st
}
