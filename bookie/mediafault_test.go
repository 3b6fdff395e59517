package bookie_test

import (
	"bytes"
	"testing"

	"github.com/meridianmq/meridian/bookie/bookietest"
)

// The chaos suite's media faults ("corrupt journal", "truncate journal N"
// through the fault layer, at random offsets) never make the bookie serve
// wrong bytes: each acknowledged entry reads back intact or fails (corrupt
// or missing, for autorecovery to re-replicate), live and after a crash
// replay, and the bookie restarts.
func TestMediaFaultsNeverServeWrongData(t *testing.T) {
	c := bookietest.StartCluster(t, 1)
	ctx := ctxT(t)
	const ledger, size = 9, 700
	next := int64(0)
	bad := 0
	checkAll := func(when string) {
		t.Helper()
		for e := int64(0); e < next; e++ {
			got, err := read(ctx, c.Client(0), ledger, e)
			if err != nil {
				bad++
				continue
			}
			if !bytes.Equal(got, payloadFor(ledger, e, size)) {
				t.Fatalf("%s: entry %d served wrong bytes", when, e)
			}
		}
	}
	for round, cmd := range []string{"corrupt journal", "corrupt journal", "truncate journal 1000", "corrupt journal", "truncate journal 5"} {
		acked, failed, err := streamAdds(ctx, c.Client(0), ledger, next, next+200, size, 32)
		if err != nil || len(failed) > 0 || len(acked) != 200 {
			t.Fatalf("round %d adds: %d acked, %d failed, %v", round, len(acked), len(failed), err)
		}
		next += 200
		ans, err := c.FaultFS(0).Exec(cmd)
		if err != nil {
			t.Fatalf("%s: %v", cmd, err)
		}
		t.Logf("round %d: %s", round, ans)
		bad = 0
		checkAll("live")
		t.Logf("round %d live: %d of %d entries unreadable", round, bad, next)
		c.Kill(0)
		if err := c.Restart(0); err != nil {
			t.Fatalf("round %d restart: %v", round, err)
		}
		bad = 0
		checkAll("after replay")
		t.Logf("round %d after replay: %d of %d entries unreadable", round, bad, next)
	}
}
