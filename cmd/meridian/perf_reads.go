package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"

	"github.com/meridianmq/meridian/client"
)

// Read-path harness (issue 11 §3): "perf fanout" runs one producer and N
// tailing subscriptions in one process, and two flags of every perf mode:
// --receiver-queue (the consumers' window, in entries) and a hidden
// --cpuprofile FILE.

// perfReceiverQueue is the ReceiverQueueSize of perf's consumers.
var perfReceiverQueue = 1000

// maxFanoutSubscriptions bounds --subscriptions.
const maxFanoutSubscriptions = 1000

func init() {
	for _, c := range rootCmd.Commands() {
		if c.Name() == "perf" {
			registerPerfReads(c)
			return
		}
	}
}

func registerPerfReads(perf *cobra.Command) {
	var cpuProfile string
	var prof *os.File
	pf := perf.PersistentFlags()
	pf.IntVar(&perfReceiverQueue, "receiver-queue", 1000, "consumers' receiver queue (flow-control window), in entries")
	pf.StringVar(&cpuProfile, "cpuprofile", "", "write a CPU profile of this perf process to FILE")
	_ = pf.MarkHidden("cpuprofile")
	perf.PersistentPreRunE = func(*cobra.Command, []string) error {
		if perfReceiverQueue < 1 || perfReceiverQueue > client.MaxReceiverQueueSize {
			return fmt.Errorf("--receiver-queue %d: must be in [1, %d]", perfReceiverQueue, client.MaxReceiverQueueSize)
		}
		if cpuProfile == "" {
			return nil
		}
		f, err := os.Create(cpuProfile)
		if err != nil {
			return fmt.Errorf("--cpuprofile: %w", err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			return fmt.Errorf("--cpuprofile: %w", err)
		}
		prof = f
		return nil
	}
	perf.PersistentPostRunE = func(*cobra.Command, []string) error {
		if prof == nil {
			return nil
		}
		pprof.StopCPUProfile()
		return prof.Close()
	}
	perf.AddCommand(newPerfFanoutCmd(), newPerfCatchupCmd())
}

// perfFlagsOf reads the perf command's persistent flags into a perfFlags.
func perfFlagsOf(cmd *cobra.Command) (*perfFlags, error) {
	fl := cmd.Flags()
	f := &perfFlags{}
	var errs []error
	str := func(name string, p *string) {
		v, err := fl.GetString(name)
		errs = append(errs, err)
		*p = v
	}
	integer := func(name string, p *int) {
		v, err := fl.GetInt(name)
		errs = append(errs, err)
		*p = v
	}
	dur := func(name string, p *time.Duration) {
		v, err := fl.GetDuration(name)
		errs = append(errs, err)
		*p = v
	}
	str("url", &f.url)
	str("topic", &f.topic)
	str("output", &f.output)
	str("compression", &f.compression)
	str("subscription", &f.sub)
	str("type", &f.typ)
	integer("size", &f.size)
	integer("producers", &f.producers)
	integer("max-pending", &f.maxPending)
	integer("batch-max-messages", &f.batchMax)
	dur("duration", &f.duration)
	dur("batch-delay", &f.batchDelay)
	dur("connect-timeout", &f.timeout)
	dur("drain", &f.drain)
	rate, err := fl.GetFloat64("rate")
	errs = append(errs, err)
	f.rate = rate
	verbose, err := fl.GetBool("verbose")
	errs = append(errs, err)
	f.verbose = verbose
	return f, errors.Join(errs...)
}

// fanoutSub is one tailing subscription of perf fanout.
type fanoutSub struct {
	name     string
	co       *client.Consumer
	st       *perfStats
	received atomic.Int64
}

// fanoutResult is the --output json summary of perf fanout.
type fanoutResult struct {
	perfSummary
	Produced      int64            `json:"produced"`
	ProducedPerS  float64          `json:"produced_per_sec"`
	MaxLag        int64            `json:"max_lag"`
	LagAtStop     int64            `json:"lag_at_producer_stop"`
	LagAtEnd      int64            `json:"lag_at_end"`
	Subscriptions []fanoutSubStats `json:"subscriptions"`
}

type fanoutSubStats struct {
	Name      string  `json:"name"`
	Received  int64   `json:"received"`
	P50Ms     float64 `json:"p50_ms"`
	P99Ms     float64 `json:"p99_ms"`
	P999Ms    float64 `json:"p999_ms"`
	MaxLag    int64   `json:"max_lag"`
	LagAtStop int64   `json:"lag_at_producer_stop"`
}

func newPerfFanoutCmd() *cobra.Command {
	var subs int
	cmd := &cobra.Command{
		Use:   "fanout",
		Short: "One producer and --subscriptions tailing subscriptions in one process: do they keep up?",
		Long: `Subscribe --subscriptions subscriptions (from latest) to --topic, then publish
at --rate for --duration and receive on every subscription, all in this one
process. Latency = send time (carried in the payload) to receipt. Every
second the lag (acknowledged sends minus messages received) of the slowest
subscription is printed; the summary gives, per subscription, the messages
received, p50/p99/p99.9, the largest lag and the lag when the producers
stopped. Receiving stops when every subscription has every acknowledged
message, or --drain after the producers stop.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f, err := cumulativePerfFlags(cmd, true, "fanout")
			if err != nil {
				return err
			}
			if subs < 1 || subs > maxFanoutSubscriptions {
				return fmt.Errorf("--subscriptions %d: must be in [1, %d]", subs, maxFanoutSubscriptions)
			}
			ctx, stop := signalContext(cmd.Context())
			defer stop()
			c, err := connect(ctx, f.url, f.timeout, f.verbose)
			if err != nil {
				return err
			}
			defer closeQuietly(c)
			return perfFanout(ctx, cmd, c, f, subs)
		},
	}
	cmd.Flags().IntVar(&subs, "subscriptions", 10, "number of tailing subscriptions")
	return cmd
}

func perfFanout(ctx context.Context, cmd *cobra.Command, c *client.Client, f *perfFlags, n int) error {
	typ, _ := client.ParseSubscriptionType(f.typ)
	prefix := f.sub
	if prefix == "" {
		prefix = fmt.Sprintf("fanout-%d", time.Now().UnixNano())
	}
	subs := make([]*fanoutSub, n)
	for i := range subs {
		name := fmt.Sprintf("%s-%d", prefix, i)
		co, err := c.Subscribe(ctx, client.ConsumerOptions{Topic: f.topic, Subscription: name, Type: typ,
			InitialPosition: client.Latest, ReceiverQueueSize: perfReceiverQueue})
		if err != nil {
			return fmt.Errorf("subscribe %s on %s: %w", name, f.topic, err)
		}
		defer func() { _ = co.Close(context.Background()) }()
		subs[i] = &fanoutSub{name: name, co: co, st: newPerfStats()}
	}
	prodErrs := &perfStats{}
	var produced atomic.Int64
	var dups int64
	var perr error
	prodDone := make(chan struct{})
	go func() {
		defer close(prodDone)
		dups, perr = runProducers(ctx, c, f, countingStats(prodErrs, &produced))
	}()
	start := time.Now()
	cctx, ccancel := context.WithCancel(ctx)
	defer ccancel()

	// Lag sampler: prints the slowest subscription's lag every second and
	// keeps each one's maximum and its value when the producers stopped.
	maxLag := make([]int64, n)
	stopLag := make([]int64, n)
	lag := func(i int) int64 { return max(produced.Load()-subs[i].received.Load(), 0) }
	sample := func() (worst int64) {
		for i := range subs {
			l := lag(i)
			maxLag[i] = max(maxLag[i], l)
			worst = max(worst, l)
		}
		return worst
	}
	var samplerWG sync.WaitGroup
	samplerWG.Go(func() {
		w := progressWriter(cmd, f)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		last, lastN := start, int64(0)
		done := prodDone // nil once seen
		for {
			select {
			case <-cctx.Done():
				return
			case <-done:
				for i := range subs {
					stopLag[i] = lag(i)
					maxLag[i] = max(maxLag[i], stopLag[i])
				}
				done = nil
			case now := <-t.C:
				worst := sample()
				var tot int64
				for _, s := range subs {
					tot += s.received.Load()
				}
				fmt.Fprintf(w, "[fanout %4.0fs] produced %9.0f msg/s  delivered %9.0f msg/s  worst lag %d\n",
					now.Sub(start).Seconds(), float64(produced.Load())/now.Sub(start).Seconds(),
					float64(tot-lastN)/now.Sub(last).Seconds(), worst)
				last, lastN = now, tot
			}
		}
	})
	// Stop receiving once producers are done and every subscription has
	// every acknowledged message, or --drain after the producers stop.
	go func() {
		<-prodDone
		deadline := time.NewTimer(f.drain)
		defer deadline.Stop()
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			caught := true
			for i := range subs {
				caught = caught && lag(i) == 0
			}
			if caught {
				ccancel()
				return
			}
			select {
			case <-tick.C:
			case <-deadline.C:
				ccancel()
				return
			case <-ctx.Done():
				ccancel()
				return
			}
		}
	}()
	var wg sync.WaitGroup
	for _, s := range subs {
		wg.Go(func() { fanoutReceive(cctx, s) })
	}
	wg.Wait()
	ccancel()
	samplerWG.Wait()
	<-prodDone
	if perr != nil {
		return perr
	}
	elapsed := time.Since(start)
	all := newPerfStats()
	all.start = start
	for _, s := range subs {
		s.st.mu.Lock()
		all.total.Merge(s.st.total)
		all.msgs += s.st.msgs
		all.bytes += s.st.bytes
		if s.st.last.After(all.last) {
			all.last = s.st.last
		}
		all.errs.Add(s.st.errs.Load())
		s.st.mu.Unlock()
	}
	res := fanoutResult{perfSummary: all.summary(elapsed), Produced: produced.Load(), Subscriptions: make([]fanoutSubStats, n)}
	res.Errors += prodErrs.errs.Load()
	res.Duplicates = dups
	res.ProducedPerS = float64(res.Produced) / min(elapsed, f.duration).Seconds()
	for i, s := range subs {
		sm := s.st.summary(elapsed)
		l := lag(i)
		res.Subscriptions[i] = fanoutSubStats{Name: s.name, Received: s.received.Load(), P50Ms: sm.P50Ms, P99Ms: sm.P99Ms,
			P999Ms: sm.P999Ms, MaxLag: maxLag[i], LagAtStop: stopLag[i]}
		res.MaxLag = max(res.MaxLag, maxLag[i])
		res.LagAtStop = max(res.LagAtStop, stopLag[i])
		res.LagAtEnd = max(res.LagAtEnd, l)
	}
	if f.output == "json" {
		(&lineWriter{w: cmd.OutOrStdout()}).json(res)
		return nil
	}
	out := cmd.OutOrStdout()
	for _, s := range res.Subscriptions {
		fmt.Fprintf(out, "subscription %s: %d received, p50 %.2f ms, p99 %.2f ms, p99.9 %.2f ms, max lag %d, lag at producer stop %d\n",
			s.Name, s.Received, s.P50Ms, s.P99Ms, s.P999Ms, s.MaxLag, s.LagAtStop)
	}
	fmt.Fprintf(out, "fanout: %d acknowledged (%.0f msg/s) to %d subscriptions; max lag %d, lag at producer stop %d, lag at end %d\n",
		res.Produced, res.ProducedPerS, n, res.MaxLag, res.LagAtStop, res.LagAtEnd)
	printSummary(cmd, f, "fanout", res.perfSummary)
	return nil
}

// fanoutReceive receives on one subscription until ctx ends, recording
// send-to-receipt latency in s.st, and acknowledges cumulatively
// (coalesced: one ack in flight at a time, for the newest message).
func fanoutReceive(ctx context.Context, s *fanoutSub) {
	acks := make(chan client.MessageID, 1)
	var wg sync.WaitGroup
	wg.Go(func() {
		for id := range acks {
			actx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			if err := s.co.AckCumulative(actx, id); err != nil {
				s.st.errs.Add(1)
			}
			cancel()
		}
	})
	defer func() {
		close(acks)
		wg.Wait()
	}()
	for {
		m, err := s.co.Receive(ctx)
		if err != nil {
			return
		}
		now := time.Now()
		var lat time.Duration
		if len(m.Payload) >= 8 {
			lat = now.Sub(time.Unix(0, int64(binary.BigEndian.Uint64(m.Payload))))
		}
		s.st.record(lat, len(m.Payload))
		s.received.Add(1)
		offerLatest(acks, m.ID)
	}
}

func newPerfCatchupCmd() *cobra.Command {
	var idle time.Duration
	cmd := &cobra.Command{
		Use:   "catchup",
		Short: "Read a topic's backlog from the earliest message as fast as possible and report MB/s",
		Long: `Subscribe --subscription (default: a new one) from the earliest message of
--topic and receive until no message arrived for --idle (the backlog is
drained) or --duration ends. Acknowledgements are cumulative and coalesced
(one in flight), and nothing per message but counting is done, so that the
figure is the read path's, not this process's. Prints MB/s every second and
a summary over first to last message received.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f, err := cumulativePerfFlags(cmd, false, "catchup")
			if err != nil {
				return err
			}
			if idle <= 0 {
				return fmt.Errorf("--idle %v: must be > 0", idle)
			}
			ctx, stop := signalContext(cmd.Context())
			defer stop()
			c, err := connect(ctx, f.url, f.timeout, f.verbose)
			if err != nil {
				return err
			}
			defer closeQuietly(c)
			return perfCatchup(ctx, cmd, c, f, idle)
		},
	}
	cmd.Flags().DurationVar(&idle, "idle", 2*time.Second, "stop when no message arrived for this long")
	return cmd
}

// catchupResult is the --output json summary of perf catchup.
type catchupResult struct {
	Messages   int64   `json:"messages"`
	Bytes      int64   `json:"bytes"`
	Seconds    float64 `json:"seconds"`
	MsgsPerSec float64 `json:"msgs_per_sec"`
	MBPerSec   float64 `json:"mb_per_sec"`
	Errors     int64   `json:"errors"`
}

func perfCatchup(ctx context.Context, cmd *cobra.Command, c *client.Client, f *perfFlags, idle time.Duration) error {
	co, err := perfSubscribe(ctx, c, f, client.Earliest)
	if err != nil {
		return err
	}
	defer func() { _ = co.Close(context.Background()) }()
	rctx, cancel := context.WithTimeout(ctx, f.duration)
	defer cancel()
	s := &fanoutSub{name: co.Subscription(), co: co, st: newPerfStats()}
	var bytes atomic.Int64
	var first, last atomic.Int64 // unix nanoseconds
	var wg sync.WaitGroup
	// Idle watchdog and progress.
	wg.Go(func() {
		w := progressWriter(cmd, f)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		start := time.Now()
		lastB, lastT := int64(0), start
		for {
			select {
			case <-rctx.Done():
				return
			case now := <-t.C:
				b := bytes.Load()
				fmt.Fprintf(w, "[catchup %4.0fs] %9.0f avg msg/s %8.2f MB/s  total %d messages\n", now.Sub(start).Seconds(),
					float64(s.received.Load())/now.Sub(start).Seconds(), float64(b-lastB)/now.Sub(lastT).Seconds()/1e6, s.received.Load())
				lastB, lastT = b, now
				ref := last.Load()
				if ref == 0 {
					ref = start.UnixNano()
				}
				if now.Sub(time.Unix(0, ref)) >= idle {
					cancel()
					return
				}
			}
		}
	})
	acks := make(chan client.MessageID, 1)
	wg.Go(func() {
		for id := range acks {
			actx, acancel := context.WithTimeout(context.Background(), 10*time.Second)
			if err := co.AckCumulative(actx, id); err != nil {
				s.st.errs.Add(1)
			}
			acancel()
		}
	})
	for {
		m, err := co.Receive(rctx)
		if err != nil {
			break
		}
		now := time.Now().UnixNano()
		first.CompareAndSwap(0, now)
		last.Store(now)
		s.received.Add(1)
		bytes.Add(int64(len(m.Payload)))
		offerLatest(acks, m.ID)
	}
	cancel()
	close(acks)
	wg.Wait()
	res := catchupResult{Messages: s.received.Load(), Bytes: bytes.Load(), Errors: s.st.errs.Load()}
	if fst := first.Load(); fst != 0 {
		res.Seconds = max(time.Duration(last.Load()-fst).Seconds(), 1e-9)
		res.MsgsPerSec = float64(res.Messages) / res.Seconds
		res.MBPerSec = float64(res.Bytes) / res.Seconds / 1e6
	}
	if f.output == "json" {
		(&lineWriter{w: cmd.OutOrStdout()}).json(res)
		return nil
	}
	fmt.Fprintf(cmd.OutOrStdout(), "catchup summary: %d messages, %d bytes in %.2f s (first to last receipt), %.0f msg/s, %.2f MB/s, %d errors\n",
		res.Messages, res.Bytes, res.Seconds, res.MsgsPerSec, res.MBPerSec, res.Errors)
	return nil
}

// cumulativePerfFlags reads and validates the perf flags of a mode that
// acknowledges cumulatively (fanout, catchup): Shared is refused.
func cumulativePerfFlags(cmd *cobra.Command, needRate bool, mode string) (*perfFlags, error) {
	f, err := perfFlagsOf(cmd)
	if err != nil {
		return nil, err
	}
	if err := f.validate(needRate); err != nil {
		return nil, err
	}
	if typ, _ := client.ParseSubscriptionType(f.typ); typ == client.Shared {
		return nil, fmt.Errorf("--type %s: %s acknowledges cumulatively; use exclusive, failover or key_shared", f.typ, mode)
	}
	return f, nil
}

// offerLatest queues id for the cumulative-ack goroutine without blocking:
// a queued, older ID is replaced (the newer cumulative ack covers it).
func offerLatest(acks chan client.MessageID, id client.MessageID) {
	select {
	case acks <- id:
		return
	default:
	}
	select {
	case <-acks:
	default:
	}
	select {
	case acks <- id:
	default:
	}
}
