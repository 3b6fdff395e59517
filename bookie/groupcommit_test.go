package bookie_test

import (
	"sync"
	"testing"
	"time"

	"github.com/meridianmq/meridian/bookie"
	"github.com/meridianmq/meridian/bookie/bookietest"
)

// Many adds in flight from several streams must share fdatasyncs.
func TestGroupCommitBatches(t *testing.T) {
	c := bookietest.StartCluster(t, 1)
	ctx := ctxT(t)
	const streams, per = 8, 400
	var wg sync.WaitGroup
	errs := make(chan error, streams)
	for s := range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			acked, failed, err := streamAdds(ctx, c.Client(0), int64(s), 0, per, 100, 200)
			if err != nil {
				errs <- err
				return
			}
			if len(failed) > 0 || len(acked) != per {
				t.Errorf("stream %d: %d acked, %d failed", s, len(acked), len(failed))
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	srv := c.Server(0)
	adds := metricValue(t, srv, "meridian_bookie_add_entries_total")
	fsyncs := metricValue(t, srv, "meridian_bookie_journal_fsyncs_total")
	t.Logf("adds=%v fsyncs=%v (%.1f entries per fdatasync)", adds, fsyncs, adds/fsyncs)
	if adds != streams*per {
		t.Fatalf("adds metric %v, want %d", adds, streams*per)
	}
	if fsyncs >= adds/2 {
		t.Fatalf("group commit did not batch: %v fsyncs for %v adds", fsyncs, adds)
	}
	// Every acked entry reads back.
	for s := range streams {
		for e := int64(0); e < per; e += 37 {
			if _, err := read(ctx, c.Client(0), int64(s), e); err != nil {
				t.Fatalf("read %d/%d: %v", s, e, err)
			}
		}
	}
}

// With FlushWhenIdle off, a group waits up to GroupMaxWait for company:
// concurrent unary adds share fsyncs and each waits about GroupMaxWait.
func TestGroupCommitMaxWait(t *testing.T) {
	c := bookietest.StartCluster(t, 1, bookietest.WithConfig(func(i int, cfg *bookie.Config) {
		cfg.FlushWhenIdle = false
		cfg.GroupMaxWait = 20 * time.Millisecond
		cfg.GroupMaxEntries = 1000
	}))
	ctx := ctxT(t)
	const n = 64
	var wg sync.WaitGroup
	start := time.Now()
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := add(ctx, c.Client(0), 1, int64(i), []byte("x")); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	el := time.Since(start)
	fsyncs := metricValue(t, c.Server(0), "meridian_bookie_journal_fsyncs_total")
	t.Logf("%d adds in %s with %v fsyncs", n, el, fsyncs)
	if fsyncs >= n/2 {
		t.Fatalf("%v fsyncs for %d adds", fsyncs, n)
	}
	if el < 20*time.Millisecond {
		t.Fatalf("adds completed in %s, before GroupMaxWait", el)
	}
}

// A tiny journal queue applies back-pressure instead of failing adds.
func TestQueueBackPressure(t *testing.T) {
	c := bookietest.StartCluster(t, 1, bookietest.WithConfig(func(i int, cfg *bookie.Config) {
		cfg.MaxQueuedAdds = 4
	}))
	ctx := ctxT(t)
	acked, failed, err := streamAdds(ctx, c.Client(0), 1, 0, 2000, 100, 500)
	if err != nil {
		t.Fatal(err)
	}
	if len(acked) != 2000 || len(failed) != 0 {
		t.Fatalf("%d acked, %d failed (e.g. %v)", len(acked), len(failed), failed)
	}
}
