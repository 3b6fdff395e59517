//go:build linux

package region_test

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/meridianmq/meridian/client"
	"github.com/meridianmq/meridian/region"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// BenchmarkCompare measures, in one run and on one disk (the benchmark's
// temp dir), the raw disk (4 KiB write+fdatasync, sequential 1 MiB
// write+fdatasync), Meridian (in-process standalone: one bookie that acks
// after fdatasync, driven through the Go client) and NATS JetStream
// (embedded server, file storage, SyncAlways so every write is synced
// before the ack, replicas 1). Both brokers publish the same number of
// messages of the same size with the same bound on messages in flight and
// record publish-to-ack latency per message. Run with -benchtime=1x: each
// iteration publishes MERIDIAN_COMPARE_MSGS messages (default 50000) and
// the reported figures are for the whole run. See docs/BENCHMARKS.md.
func BenchmarkCompare(b *testing.B) {
	n := compareMsgs(b)
	b.Run("disk/fdatasync-4KiB", func(b *testing.B) { benchDiskSync(b, 4<<10, 3000) })
	b.Run("disk/seq-1MiB-fdatasync", func(b *testing.B) { benchDiskSync(b, 1<<20, 128) })
	for _, size := range []int{100, 1024} {
		b.Run(fmt.Sprintf("meridian/%dB", size), func(b *testing.B) { benchMeridian(b, n, size, compareInFlight) })
		b.Run(fmt.Sprintf("jetstream/%dB", size), func(b *testing.B) { benchJetStream(b, n, size, compareInFlight) })
	}
	// One message at a time (synchronous send): the latency of a lone
	// publish, i.e. a round trip plus one sync, without queueing.
	ns := max(n/25, 1)
	b.Run("meridian/1024B-sync", func(b *testing.B) { benchMeridian(b, ns, 1024, 1) })
	b.Run("jetstream/1024B-sync", func(b *testing.B) { benchJetStream(b, ns, 1024, 1) })
}

// compareInFlight bounds the messages published but not yet acknowledged,
// for both brokers (except the -sync runs, which have one in flight).
const compareInFlight = 1000

// compareMsgs is the message count per broker and size per iteration.
func compareMsgs(b *testing.B) int {
	s := os.Getenv("MERIDIAN_COMPARE_MSGS")
	if s == "" {
		return 50000
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > 10_000_000 {
		b.Fatalf("MERIDIAN_COMPARE_MSGS=%q: want an integer in 1..10000000", s)
	}
	return n
}

// newLatencyHist records latencies in microseconds, 1 µs..120 s.
func newLatencyHist() *hdrhistogram.Histogram {
	return hdrhistogram.New(1, 120_000_000, 3)
}

// report publishes the standard figures of one sub-benchmark.
func report(b *testing.B, ops int, bytes int64, el time.Duration, h *hdrhistogram.Histogram, unit string) {
	b.ReportMetric(float64(ops)/el.Seconds(), unit)
	b.ReportMetric(float64(bytes)/el.Seconds()/1e6, "MB/s")
	b.ReportMetric(float64(h.ValueAtQuantile(50))/1000, "p50_ms")
	b.ReportMetric(float64(h.ValueAtQuantile(99))/1000, "p99_ms")
}

// benchDiskSync appends ops blocks of size bytes per iteration to a new
// file, each followed by fdatasync (what a journal does), and reports the
// rate, bandwidth and per-op latency.
func benchDiskSync(b *testing.B, size, ops int) {
	f, err := os.OpenFile(filepath.Join(b.TempDir(), "disk.bin"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, size)
	for i := range buf {
		buf[i] = byte(i * 7)
	}
	h := newLatencyHist()
	total := ops * b.N
	b.ResetTimer()
	start := time.Now()
	for range total {
		t0 := time.Now()
		if _, err := f.Write(buf); err != nil {
			b.Fatal(err)
		}
		if err := syscall.Fdatasync(int(f.Fd())); err != nil {
			b.Fatal(err)
		}
		_ = h.RecordValue(time.Since(t0).Microseconds())
	}
	el := time.Since(start)
	b.StopTimer()
	report(b, total, int64(total)*int64(size), el, h, "ops/s")
}

// payload returns a message body of size bytes (not all zeros).
func payload(size int) []byte {
	p := make([]byte, size)
	for i := range p {
		p[i] = byte('a' + i%26)
	}
	return p
}

// benchMeridian starts a standalone region in a temp dir and publishes n
// messages per iteration through the Go client with at most inFlight
// unacknowledged; the client's batching is left at its defaults (1000
// messages / 128 KiB / 10 ms). With inFlight 1 it uses Send, which closes
// the batch at once instead of waiting for the batching delay.
func benchMeridian(b *testing.B, n, size, inFlight int) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	sa, err := region.StartStandalone(ctx, region.StandaloneConfig{
		DataDir: b.TempDir(), GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", Region: "bench",
	})
	if err != nil {
		b.Fatalf("start standalone: %v", err)
	}
	defer sa.Close()
	c, err := client.New(ctx, client.Options{URL: sa.GRPCAddr()})
	if err != nil {
		b.Fatalf("client: %v", err)
	}
	defer c.Close(context.Background())
	p, err := c.NewProducer(ctx, client.ProducerOptions{
		Topic:              fmt.Sprintf("public/default/compare-%d", size),
		MaxPendingMessages: inFlight,
		BlockIfQueueFull:   true,
	})
	if err != nil {
		b.Fatalf("producer: %v", err)
	}
	defer p.Close(context.Background())
	body := payload(size)
	// Warm up: topic ownership, ledger creation, connections.
	if _, err := p.Send(ctx, &client.Message{Payload: body}); err != nil {
		b.Fatalf("warm-up send: %v", err)
	}
	syncs0, syncsOK := bookieFsyncs(sa.HTTPAddr())

	total := n * b.N
	h := newLatencyHist()
	if inFlight == 1 {
		b.ResetTimer()
		start := time.Now()
		for range total {
			t0 := time.Now()
			if _, err := p.Send(ctx, &client.Message{Payload: body}); err != nil {
				b.Fatalf("meridian send: %v", err)
			}
			_ = h.RecordValue(time.Since(t0).Microseconds())
		}
		el := time.Since(start)
		b.StopTimer()
		report(b, total, int64(total)*int64(size), el, h, "msgs/s")
		return
	}
	sem := make(chan struct{}, inFlight)
	var (
		mu       sync.Mutex
		firstErr error
		acked    int
	)
	done := make(chan struct{})
	b.ResetTimer()
	start := time.Now()
	for range total {
		sem <- struct{}{}
		t0 := time.Now()
		p.SendAsync(ctx, &client.Message{Payload: body}, func(_ client.MessageID, _ *client.Message, err error) {
			lat := time.Since(t0).Microseconds()
			mu.Lock()
			if err != nil && firstErr == nil {
				firstErr = err
			}
			_ = h.RecordValue(lat)
			acked++
			if acked == total {
				close(done)
			}
			mu.Unlock()
			<-sem
		})
	}
	select {
	case <-done:
	case <-ctx.Done():
		b.Fatalf("meridian: %d of %d acknowledged before the deadline", acked, total)
	}
	el := time.Since(start)
	b.StopTimer()
	if firstErr != nil {
		b.Fatalf("meridian publish: %v", firstErr)
	}
	report(b, total, int64(total)*int64(size), el, h, "msgs/s")
	if syncs1, ok := bookieFsyncs(sa.HTTPAddr()); ok && syncsOK && syncs1 > syncs0 {
		b.ReportMetric(float64(total)/(syncs1-syncs0), "msgs/fsync")
	}
}

// bookieFsyncs reads meridian_bookie_journal_fsyncs_total from the
// standalone's /metrics (false if it cannot).
func bookieFsyncs(httpAddr string) (float64, bool) {
	resp, err := http.Get("http://" + httpAddr + "/metrics")
	if err != nil {
		return 0, false
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, "meridian_bookie_journal_fsyncs_total"); ok {
			fields := strings.Fields(rest)
			if len(fields) == 0 {
				continue
			}
			v, err := strconv.ParseFloat(fields[len(fields)-1], 64)
			return v, err == nil
		}
	}
	return 0, false
}

// benchJetStream starts an embedded nats-server with JetStream (file
// storage in a temp dir, SyncAlways) and publishes n messages per iteration
// with async publish and ack futures, at most inFlight unacknowledged (with
// inFlight 1: synchronous Publish). Acks of one stream come back in publish
// order, so one goroutine waits on the futures in order and timestamps
// each ack.
func benchJetStream(b *testing.B, n, size, inFlight int) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	ns, err := server.NewServer(&server.Options{
		Host:               "127.0.0.1",
		Port:               server.RANDOM_PORT,
		NoLog:              true,
		NoSigs:             true,
		JetStream:          true,
		StoreDir:           b.TempDir(),
		SyncAlways:         true,
		JetStreamMaxMemory: 256 << 20,
	})
	if err != nil {
		b.Fatalf("nats-server: %v", err)
	}
	ns.Start()
	defer func() {
		ns.Shutdown()
		ns.WaitForShutdown()
	}()
	if !ns.ReadyForConnections(30 * time.Second) {
		b.Fatal("nats-server not ready")
	}
	if jc := ns.JetStreamConfig(); jc == nil || !jc.SyncAlways {
		b.Fatalf("JetStream not running with SyncAlways: %+v", jc)
	}
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		b.Fatalf("nats connect: %v", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(inFlight))
	if err != nil {
		b.Fatal(err)
	}
	subj := fmt.Sprintf("compare.%d", size)
	stream, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name: fmt.Sprintf("COMPARE%d", size), Subjects: []string{subj},
		Storage: jetstream.FileStorage, Replicas: 1,
	})
	if err != nil {
		b.Fatalf("create stream: %v", err)
	}
	body := payload(size)
	if _, err := js.Publish(ctx, subj, body); err != nil { // warm up
		b.Fatalf("warm-up publish: %v", err)
	}

	total := n * b.N
	h := newLatencyHist()
	if inFlight == 1 {
		b.ResetTimer()
		start := time.Now()
		for range total {
			t0 := time.Now()
			if _, err := js.Publish(ctx, subj, body); err != nil {
				b.Fatalf("jetstream publish: %v", err)
			}
			_ = h.RecordValue(time.Since(t0).Microseconds())
		}
		el := time.Since(start)
		b.StopTimer()
		checkStored(ctx, b, stream, total+1)
		report(b, total, int64(total)*int64(size), el, h, "msgs/s")
		return
	}
	type pending struct {
		f  jetstream.PubAckFuture
		t0 time.Time
	}
	futures := make(chan pending, inFlight)
	sem := make(chan struct{}, inFlight)
	collected := make(chan error, 1)
	go func() {
		var firstErr error
		for pf := range futures {
			select {
			case <-pf.f.Ok():
			case err := <-pf.f.Err():
				if firstErr == nil {
					firstErr = err
				}
			case <-ctx.Done():
				collected <- fmt.Errorf("jetstream: ack wait: %w", ctx.Err())
				return
			}
			_ = h.RecordValue(time.Since(pf.t0).Microseconds())
			<-sem
		}
		collected <- firstErr
	}()
	b.ResetTimer()
	start := time.Now()
	var pubErr error
	for range total {
		sem <- struct{}{}
		t0 := time.Now()
		f, err := js.PublishAsync(subj, body)
		if err != nil {
			pubErr = err
			<-sem
			break
		}
		futures <- pending{f, t0}
	}
	close(futures)
	err = <-collected
	el := time.Since(start)
	b.StopTimer()
	if pubErr != nil {
		b.Fatalf("jetstream publish: %v", pubErr)
	}
	if err != nil {
		b.Fatalf("jetstream ack: %v", err)
	}
	checkStored(ctx, b, stream, total+1)
	report(b, total, int64(total)*int64(size), el, h, "msgs/s")
}

// checkStored fails unless the stream holds exactly want messages.
func checkStored(ctx context.Context, b *testing.B, stream jetstream.Stream, want int) {
	info, err := stream.Info(ctx)
	if err != nil {
		b.Fatalf("stream info: %v", err)
	}
	if info.State.Msgs != uint64(want) {
		b.Fatalf("jetstream stored %d messages, want %d", info.State.Msgs, want)
	}
}
