package ledger_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/meridianmq/meridian/bookie/ledger"
)

// benchInFlight is the writer window used by the add benchmarks ("a few
// hundred entries in flight").
const benchInFlight = 256

// benchResults collects the last round of each sub-benchmark so the parent
// can print the comparison with the raw disk.
var benchResults = struct {
	sync.Mutex
	m map[string]float64
}{m: map[string]float64{}}

func setResult(k string, v float64) {
	benchResults.Lock()
	benchResults.m[k] = v
	benchResults.Unlock()
}

// BenchmarkLedger measures, in one run and on one disk: raw 4 KiB
// write+fdatasync ops/s, raw sequential write bandwidth with fdatasync (1
// MiB per fdatasync), and ledger add throughput and latency for 100 B,
// 1 KiB and 64 KiB entries with E=Qw=Qa=1 and E=3/Qw=3/Qa=2 on three
// loopback bookies, with benchInFlight adds in flight.
//
//	go test -run '^$' -bench BenchmarkLedger -benchtime 2s ./bookie/ledger/
//
// One case beside the raw limits (the summary skips absent cases):
//
//	go test -run '^$' -bench 'BenchmarkLedger/(raw-before|E3Qw3Qa2|raw-after)/(fdatasync|seq|65536B)' -benchtime 2s ./bookie/ledger/
func BenchmarkLedger(b *testing.B) {
	dir := b.TempDir()
	// The disk is shared: measure its raw limits before and after the
	// ledger runs and compare against the better (harder) of the two.
	benchRaw(b, dir, "raw-before")
	e := newEnv(b, 3)
	c := e.client(func(c *ledger.Config) {
		c.MaxInFlight = benchInFlight
		if v, err := strconv.Atoi(os.Getenv("LEDGER_BENCH_INFLIGHT")); err == nil && v > 0 {
			c.MaxInFlight = v
		}
		c.Logger = nil
	})
	for _, q := range []ledger.CreateOptions{
		{Ensemble: 1, WriteQuorum: 1, AckQuorum: 1},
		{Ensemble: 3, WriteQuorum: 3, AckQuorum: 2},
	} {
		for _, size := range []int{100, 1024, 64 << 10} {
			name := fmt.Sprintf("E%dQw%dQa%d/%dB", q.Ensemble, q.WriteQuorum, q.AckQuorum, size)
			b.Run(name, func(b *testing.B) {
				benchAdds(b, c, q, size, name)
			})
		}
	}

	benchRaw(b, dir, "raw-after")

	benchResults.Lock()
	defer benchResults.Unlock()
	r := benchResults.m
	r["raw-ops"] = max(r["raw-before/ops"], r["raw-after/ops"])
	r["raw-bw"] = max(r["raw-before/bw"], r["raw-after/bw"])
	host, _ := os.Hostname()
	fmt.Printf("machine %s; temp dir %s\n", host, dir)
	for _, q := range []string{"E1Qw1Qa1", "E3Qw3Qa2"} {
		if r["raw-ops"] > 0 && r[q+"/100B"] > 0 {
			x := r[q+"/100B"] / r["raw-ops"]
			fmt.Printf("%s 100 B: %.0f entries/s = %.1fx raw fdatasync ops/s (%.0f); target >= 20x: %s\n",
				q, r[q+"/100B"], x, r["raw-ops"], verdict(x >= 20))
		}
		if r["raw-bw"] > 0 && r[q+"/65536B"] > 0 {
			repl := 1.0
			if q == "E3Qw3Qa2" {
				repl = 3
			}
			bw := r[q+"/65536B"] * 65536 * repl
			fmt.Printf("%s 64 KiB: %.1f MB/s counting %v replicas = %.0f%% of raw sequential %.1f MB/s; target >= 60%%: %s\n",
				q, bw/1e6, repl, 100*bw/r["raw-bw"], r["raw-bw"]/1e6, verdict(bw >= 0.6*r["raw-bw"]))
		}
	}
}

// benchRaw measures 4 KiB write+fdatasync ops/s and sequential bandwidth
// (1 MiB write + fdatasync) in dir.
func benchRaw(b *testing.B, dir, name string) {
	b.Run(name+"/fdatasync-4KiB", func(b *testing.B) {
		f := openRawSyncFile(b, dir, fmt.Sprintf("%s-sync-%d", name, b.N))
		buf := make([]byte, 4096)
		b.SetBytes(int64(len(buf)))
		b.ResetTimer()
		start := time.Now()
		for range b.N {
			f.writeSync(b, buf)
		}
		ops := float64(b.N) / time.Since(start).Seconds()
		b.ReportMetric(ops, "ops/s")
		setResult(name+"/ops", ops)
	})
	b.Run(name+"/seq-1MiB-fdatasync", func(b *testing.B) {
		f := openRawSyncFile(b, dir, fmt.Sprintf("%s-seq-%d", name, b.N))
		buf := make([]byte, 1<<20)
		b.SetBytes(int64(len(buf)))
		b.ResetTimer()
		start := time.Now()
		for range b.N {
			f.writeSync(b, buf)
		}
		bw := float64(b.N) * float64(len(buf)) / time.Since(start).Seconds()
		b.ReportMetric(bw/1e6, "MB/s")
		setResult(name+"/bw", bw)
	})
}

func verdict(ok bool) string {
	if ok {
		return "MET"
	}
	return "NOT MET"
}

// benchAdds appends b.N entries of size bytes to a fresh ledger with at
// most benchInFlight in flight and reports entries/s and latency
// percentiles (from AppendAsync to the callback).
func benchAdds(b *testing.B, c *ledger.Client, q ledger.CreateOptions, size int, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	w, err := c.Create(ctx, q)
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		if err := w.Close(ctx); err != nil {
			b.Error(err)
		}
	}()
	data := make([]byte, size)
	for i := range data {
		data[i] = byte(i)
	}
	// Latencies in microseconds, 1 µs .. 60 s, 3 significant digits.
	h := hdrhistogram.New(1, 60_000_000, 3)
	var (
		wg      sync.WaitGroup
		errOnce sync.Once
		addErr  error
	)
	b.SetBytes(int64(size))
	b.ResetTimer()
	start := time.Now()
	wg.Add(b.N)
	for range b.N {
		t0 := time.Now()
		w.AppendAsync(data, func(_ int64, err error) {
			if err != nil {
				errOnce.Do(func() { addErr = err })
			} else {
				_ = h.RecordValue(time.Since(t0).Microseconds())
			}
			wg.Done()
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if addErr != nil {
		b.Fatal(addErr)
	}
	rate := float64(b.N) / elapsed.Seconds()
	b.ReportMetric(rate, "entries/s")
	b.ReportMetric(float64(h.ValueAtQuantile(50)), "p50-µs")
	b.ReportMetric(float64(h.ValueAtQuantile(99)), "p99-µs")
	b.ReportMetric(float64(h.ValueAtQuantile(99.9)), "p99.9-µs")
	setResult(name, rate)
}
