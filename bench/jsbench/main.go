// Command jsbench publishes to a NATS JetStream stream the way
// `meridian perf produce` publishes to a Meridian topic, so the two can be
// compared at equal message size and concurrency: --producers publishers,
// each with at most --max-pending unacknowledged asynchronous publishes,
// paced to --rate messages per second in total (0: as fast as possible),
// for --duration. The latency of a message is the time from just before
// its publish to its acknowledgement, recorded in microseconds in an HDR
// histogram (1 µs .. 120 s, 3 significant digits) like perf. With
// --output json the summary is one JSON line with perf's field names.
package main

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// summary is perf's --output json summary line.
type summary struct {
	Messages   int64   `json:"messages"`
	MsgsPerSec float64 `json:"msgs_per_sec"`
	MBPerSec   float64 `json:"mb_per_sec"`
	P50Ms      float64 `json:"p50_ms"`
	P99Ms      float64 `json:"p99_ms"`
	P999Ms     float64 `json:"p999_ms"`
	MaxMs      float64 `json:"max_ms"`
	Errors     int64   `json:"errors"`
}

type config struct {
	url        string
	stream     string
	subject    string
	replicas   int
	create     bool
	rate       float64
	size       int
	duration   time.Duration
	producers  int
	maxPending int
	output     string
}

func (c *config) validate() error {
	switch {
	case c.url == "":
		return errors.New("--url: required")
	case c.size < 8 || c.size > 1<<20:
		return fmt.Errorf("--size %d: must be 8..1048576 bytes", c.size)
	case c.producers < 1 || c.producers > 1024:
		return fmt.Errorf("--producers %d: must be 1..1024", c.producers)
	case c.maxPending < 1 || c.maxPending > 1_000_000:
		return fmt.Errorf("--max-pending %d: must be 1..1000000", c.maxPending)
	case c.rate < 0:
		return fmt.Errorf("--rate %g: must be >= 0", c.rate)
	case c.duration <= 0:
		return fmt.Errorf("--duration %s: must be > 0", c.duration)
	case c.replicas < 1 || c.replicas > 5:
		return fmt.Errorf("--replicas %d: must be 1..5", c.replicas)
	case c.output != "text" && c.output != "json":
		return fmt.Errorf("--output %q: must be text or json", c.output)
	}
	return nil
}

// stats is an HDR histogram of ack latencies with message and byte counts.
type stats struct {
	mu    sync.Mutex
	h     *hdrhistogram.Histogram
	msgs  int64
	bytes int64
	start time.Time
	last  time.Time
	errs  atomic.Int64
}

func (s *stats) record(lat time.Duration, size int) {
	us := max(lat.Microseconds(), 1)
	s.mu.Lock()
	_ = s.h.RecordValue(us)
	s.msgs++
	s.bytes += int64(size)
	s.last = time.Now()
	s.mu.Unlock()
}

func ms(us int64) float64 { return float64(us) / 1000 }

func (s *stats) summary() summary {
	s.mu.Lock()
	defer s.mu.Unlock()
	sec := max(s.last.Sub(s.start).Seconds(), 1e-9)
	return summary{
		Messages: s.msgs, MsgsPerSec: float64(s.msgs) / sec, MBPerSec: float64(s.bytes) / sec / 1e6,
		P50Ms: ms(s.h.ValueAtQuantile(50)), P99Ms: ms(s.h.ValueAtQuantile(99)), P999Ms: ms(s.h.ValueAtQuantile(99.9)),
		MaxMs: ms(s.h.Max()), Errors: s.errs.Load(),
	}
}

// pacer spaces events at rate per second from its start (no pacing at 0).
type pacer struct {
	start time.Time
	rate  float64
	n     int64
}

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
		}
	}
	return ctx.Err()
}

func main() {
	c := &config{}
	flag.StringVar(&c.url, "url", nats.DefaultURL, "NATS server URLs (comma-separated)")
	flag.StringVar(&c.stream, "stream", "BENCH", "stream name")
	flag.StringVar(&c.subject, "subject", "bench.js", "subject the stream captures")
	flag.IntVar(&c.replicas, "replicas", 3, "stream replicas (file storage)")
	flag.BoolVar(&c.create, "create", true, "delete and create the stream before publishing")
	flag.Float64Var(&c.rate, "rate", 0, "total messages per second over all producers (0 = as fast as possible)")
	flag.IntVar(&c.size, "size", 1024, "message size in bytes")
	flag.DurationVar(&c.duration, "duration", 10*time.Second, "how long to publish")
	flag.IntVar(&c.producers, "producers", 1, "number of producers (one connection each)")
	flag.IntVar(&c.maxPending, "max-pending", 1000, "maximum unacknowledged publishes per producer")
	flag.StringVar(&c.output, "output", "text", "output format: text or json")
	flag.Parse()
	if err := c.validate(); err != nil {
		fmt.Fprintln(os.Stderr, "jsbench:", err)
		os.Exit(2)
	}
	s, err := run(context.Background(), c)
	if err != nil {
		slog.Error("jsbench failed", "err", err)
		os.Exit(1)
	}
	if c.output == "json" {
		_ = json.NewEncoder(os.Stdout).Encode(s)
		return
	}
	fmt.Printf("jetstream produce: %d msgs, %.0f msgs/s, %.1f MB/s, p50 %.2f ms, p99 %.2f ms, p99.9 %.2f ms, max %.2f ms, %d errors\n",
		s.Messages, s.MsgsPerSec, s.MBPerSec, s.P50Ms, s.P99Ms, s.P999Ms, s.MaxMs, s.Errors)
}

func run(ctx context.Context, c *config) (summary, error) {
	admin, err := nats.Connect(c.url)
	if err != nil {
		return summary{}, fmt.Errorf("connect %s: %w", c.url, err)
	}
	defer admin.Close()
	ajs, err := jetstream.New(admin)
	if err != nil {
		return summary{}, err
	}
	if c.create {
		actx, cancel := context.WithTimeout(ctx, 30*time.Second)
		_ = ajs.DeleteStream(actx, c.stream)
		_, err = ajs.CreateStream(actx, jetstream.StreamConfig{
			Name: c.stream, Subjects: []string{c.subject}, Storage: jetstream.FileStorage, Replicas: c.replicas,
		})
		cancel()
		if err != nil {
			return summary{}, fmt.Errorf("create stream %s (R%d): %w", c.stream, c.replicas, err)
		}
	}
	st := &stats{h: hdrhistogram.New(1, 120_000_000, 3)}
	conns := make([]*nats.Conn, c.producers)
	jss := make([]jetstream.JetStream, c.producers)
	for i := range conns {
		nc, err := nats.Connect(c.url)
		if err != nil {
			return summary{}, fmt.Errorf("connect producer %d: %w", i, err)
		}
		defer nc.Close()
		js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(c.maxPending),
			jetstream.WithPublishAsyncTimeout(30*time.Second))
		if err != nil {
			return summary{}, err
		}
		conns[i], jss[i] = nc, js
	}
	rctx, cancel := context.WithTimeout(ctx, c.duration)
	defer cancel()
	st.start = time.Now()
	var wg sync.WaitGroup
	for _, js := range jss {
		wg.Go(func() { produce(rctx, js, c, st) })
	}
	wg.Wait()
	return st.summary(), nil
}

// produce publishes until ctx ends, then waits for the acknowledgements
// of what it sent. A collector awaits the futures in publish order (a
// stream acknowledges in order); a full window blocks the publisher (stall
// wait 30 s) like perf's BlockIfQueueFull.
func produce(ctx context.Context, js jetstream.JetStream, c *config, st *stats) {
	type sent struct {
		f  jetstream.PubAckFuture
		at time.Time
	}
	futures := make(chan sent, c.maxPending)
	var wg sync.WaitGroup
	wg.Go(func() {
		for s := range futures {
			select {
			case <-s.f.Ok():
				st.record(time.Since(s.at), c.size)
			case err := <-s.f.Err():
				if !strings.Contains(err.Error(), "context") {
					st.errs.Add(1)
				}
			}
		}
	})
	pace := &pacer{start: time.Now(), rate: c.rate / float64(c.producers)}
	for pace.wait(ctx) == nil {
		payload := make([]byte, c.size)
		at := time.Now()
		binary.BigEndian.PutUint64(payload, uint64(at.UnixNano()))
		f, err := js.PublishAsync(c.subject, payload, jetstream.WithStallWait(30*time.Second))
		if err != nil {
			st.errs.Add(1)
			continue
		}
		futures <- sent{f: f, at: at}
	}
	close(futures)
	wg.Wait()
}
