package bookie_test

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	bookiev1 "github.com/meridianmq/meridian/api/bookie/v1"
	"github.com/meridianmq/meridian/bookie"
	"github.com/meridianmq/meridian/bookie/bookietest"
	"github.com/meridianmq/meridian/internal/faultfs"
)

// BenchmarkBookie measures one in-process bookie over loopback gRPC with
// many adds in flight, and beside it, in the same directory, the raw disk:
// 4 KiB write+fdatasync ops/s and sequential write bandwidth with
// fdatasync after every 1 MiB. Run:
//
//	go test -run '^$' -bench BenchmarkBookie -benchtime 3s ./bookie/
//
// MERIDIAN_BENCH_DIR overrides the directory (default: a temp dir).
func BenchmarkBookie(b *testing.B) {
	for _, size := range []int{100, 1024, 64 << 10} {
		b.Run(fmt.Sprintf("add/%dB", size), func(b *testing.B) { benchAdds(b, size, 4, 64) })
	}
	b.Run("raw/write4KiB+fdatasync", func(b *testing.B) { benchRaw(b, 4<<10) })
	b.Run("raw/seqwrite1MiB+fdatasync", func(b *testing.B) { benchRaw(b, 1<<20) })
}

func benchDir(b *testing.B) string {
	if d := os.Getenv("MERIDIAN_BENCH_DIR"); d != "" {
		dir, err := os.MkdirTemp(d, "bench")
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { os.RemoveAll(dir) })
		return dir
	}
	return b.TempDir()
}

func benchAdds(b *testing.B, size, streams, window int) {
	base := benchDir(b)
	c := bookietest.StartCluster(b, 1, bookietest.WithConfig(func(i int, cfg *bookie.Config) {
		cfg.JournalDir = filepath.Join(base, "journal")
		cfg.LedgerDir = filepath.Join(base, "ledgers")
	}))
	ctx := ctxT(b)
	hist := hdrhistogram.New(1, int64(10*time.Second/time.Microsecond), 3)
	var hmu sync.Mutex
	var next atomic.Int64
	payload := make([]byte, size)
	for i := range payload {
		payload[i] = byte(i)
	}
	fsyncs0 := metricValue(b, c.Server(0), "meridian_bookie_journal_fsyncs_total")
	b.SetBytes(int64(size))
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for s := range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st, err := c.Client(0).AddEntries(ctx)
			if err != nil {
				b.Error(err)
				return
			}
			sent := make(map[int64]time.Time, window)
			var smu sync.Mutex
			sem := make(chan struct{}, window)
			go func() {
				for e := int64(0); ; e++ {
					if next.Add(1) > int64(b.N) {
						st.CloseSend()
						return
					}
					sem <- struct{}{}
					smu.Lock()
					sent[e] = time.Now()
					smu.Unlock()
					if err := st.Send(&bookiev1.AddEntriesRequest{Entries: []*bookiev1.AddEntryRequest{{LedgerId: int64(s), EntryId: e, Payload: payload, LastAddConfirmed: e - 1}}}); err != nil {
						return
					}
				}
			}()
			local := hdrhistogram.New(1, int64(10*time.Second/time.Microsecond), 3)
			for {
				m, err := st.Recv()
				if err != nil {
					break
				}
				for _, r := range m.Results {
					if r.Code != 0 {
						b.Errorf("add failed: %s", r.Message)
					}
					smu.Lock()
					t0 := sent[r.EntryId]
					delete(sent, r.EntryId)
					smu.Unlock()
					local.RecordValue(time.Since(t0).Microseconds())
					<-sem
				}
			}
			hmu.Lock()
			hist.Merge(local)
			hmu.Unlock()
		}()
	}
	wg.Wait()
	el := time.Since(start)
	b.StopTimer()
	fsyncs := metricValue(b, c.Server(0), "meridian_bookie_journal_fsyncs_total") - fsyncs0
	b.ReportMetric(float64(b.N)/el.Seconds(), "entries/s")
	b.ReportMetric(float64(hist.ValueAtQuantile(50)), "p50-µs")
	b.ReportMetric(float64(hist.ValueAtQuantile(99)), "p99-µs")
	b.ReportMetric(float64(hist.ValueAtQuantile(99.9)), "p99.9-µs")
	if fsyncs > 0 {
		b.ReportMetric(float64(b.N)/fsyncs, "entries/fsync")
	}
}

// benchRaw writes chunk bytes then fdatasyncs, b.N times, through the same
// file layer the bookie uses.
func benchRaw(b *testing.B, chunk int) {
	dir := benchDir(b)
	fsys := faultfs.OS{}
	f, err := fsys.Create(filepath.Join(dir, "raw.dat"))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, chunk)
	for i := range buf {
		buf[i] = byte(i * 7)
	}
	b.SetBytes(int64(chunk))
	b.ResetTimer()
	start := time.Now()
	var written int64
	for i := 0; i < b.N; i++ {
		if _, err := f.Write(buf); err != nil {
			b.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			b.Fatal(err)
		}
		written += int64(chunk)
		// Keep the file bounded (256 MiB) so long runs don't fill the disk.
		if written >= 256<<20 {
			if err := f.Truncate(0); err != nil {
				b.Fatal(err)
			}
			f.Close()
			if f, err = fsys.Create(filepath.Join(dir, "raw.dat")); err != nil {
				b.Fatal(err)
			}
			written = 0
		}
	}
	el := time.Since(start)
	b.ReportMetric(float64(b.N)/el.Seconds(), "fdatasyncs/s")
}
