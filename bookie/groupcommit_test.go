package bookie_test

import (
	"sync"
	"testing"

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
