package bookie_test

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	bookiev1 "github.com/meridianmq/meridian/api/bookie/v1"
	"github.com/meridianmq/meridian/bookie"
	"github.com/meridianmq/meridian/bookie/bookietest"
	"github.com/meridianmq/meridian/internal/faultfs"
)

// An fsync failure fails every add of its group, turns the bookie
// read-only, and loses nothing that was acknowledged before.
func TestFsyncErrorFailsAddsAndGoesReadOnly(t *testing.T) {
	c := bookietest.StartCluster(t, 1)
	ctx := ctxT(t)
	cl := c.Client(0)
	for e := int64(0); e < 20; e++ {
		if err := add(ctx, cl, 1, e, payloadFor(1, e, 512)); err != nil {
			t.Fatal(err)
		}
	}
	id := c.FaultFS(0).FailSyncs("journal")
	acked, failed, err := streamAdds(ctx, cl, 1, 20, 220, 512, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(acked) != 0 {
		t.Fatalf("%d adds acknowledged although every fsync failed: %v", len(acked), acked)
	}
	ioErrs := 0
	for e, err := range failed {
		switch {
		case errors.Is(err, bookie.ErrIO):
			ioErrs++
		case errors.Is(err, bookie.ErrReadOnly):
		default:
			t.Fatalf("entry %d: unexpected error %v", e, err)
		}
	}
	if ioErrs == 0 || c.FaultFS(0).Hits(faultfs.OpSync) == 0 {
		t.Fatalf("no add saw the fsync error (io errors %d)", ioErrs)
	}
	if ro, why := c.Server(0).ReadOnly(); !ro {
		t.Fatal("bookie not read-only after an fsync error")
	} else {
		t.Logf("read-only: %s", why)
	}
	info, err := cl.GetInfo(ctx, &bookiev1.GetInfoRequest{})
	if err != nil || !info.ReadOnly {
		t.Fatalf("GetInfo: %v %+v", err, info)
	}
	if err := add(ctx, cl, 2, 0, []byte("x")); !errors.Is(err, bookie.ErrReadOnly) {
		t.Fatalf("add on read-only bookie: %v", err)
	}
	// Unacknowledged entries are not served; acknowledged ones are.
	if _, err := read(ctx, cl, 1, 20); !errors.Is(err, bookie.ErrNoSuchEntry) {
		t.Fatalf("failed add readable: %v", err)
	}
	for e := int64(0); e < 20; e++ {
		if _, err := read(ctx, cl, 1, e); err != nil {
			t.Fatalf("acked entry %d: %v", e, err)
		}
	}
	// After the disk is fixed, a restart makes the bookie writable again
	// and nothing acknowledged is lost.
	c.FaultFS(0).Clear(id)
	c.Kill(0)
	if err := c.Restart(0); err != nil {
		t.Fatal(err)
	}
	cl = c.Client(0)
	if ro, _ := c.Server(0).ReadOnly(); ro {
		t.Fatal("still read-only after restart")
	}
	for e := int64(0); e < 20; e++ {
		if _, err := read(ctx, cl, 1, e); err != nil {
			t.Fatalf("after restart, acked entry %d: %v", e, err)
		}
	}
	extra := 0
	for e := int64(20); e < 220; e++ {
		if _, err := read(ctx, cl, 1, e); err == nil {
			extra++
		}
	}
	t.Logf("after restart %d never-acknowledged entries are present (allowed)", extra)
}

// Crossing the disk-usage threshold turns the bookie read-only (polled by
// the bookie itself); going below the low-water mark turns it back.
func TestDiskFullGoesReadOnly(t *testing.T) {
	c := bookietest.StartCluster(t, 1, bookietest.WithConfig(func(i int, cfg *bookie.Config) {
		cfg.DiskCheckInterval = 50 * time.Millisecond
	}))
	ctx := ctxT(t)
	cl := c.Client(0)
	if err := add(ctx, cl, 1, 0, []byte("before")); err != nil {
		t.Fatal(err)
	}
	ffs := c.FaultFS(0)
	ffs.SetUsage(&faultfs.Usage{Total: 1000, Free: 40}) // 96% used
	waitFor(t, 20*time.Second, "read-only", func() bool { ro, _ := c.Server(0).ReadOnly(); return ro })
	if err := add(ctx, cl, 1, 1, []byte("x")); !errors.Is(err, bookie.ErrReadOnly) {
		t.Fatalf("add at 96%%: %v", err)
	}
	// Fences still work while read-only for space (recovery needs them).
	if _, err := cl.Fence(ctx, &bookiev1.FenceRequest{LedgerId: 9}); err != nil {
		t.Fatalf("fence while disk read-only: %v", err)
	}
	ffs.SetUsage(&faultfs.Usage{Total: 1000, Free: 80}) // 92%: above low water, stays read-only
	time.Sleep(200 * time.Millisecond)
	if ro, _ := c.Server(0).ReadOnly(); !ro {
		t.Fatal("left read-only above the low-water mark")
	}
	ffs.SetUsage(&faultfs.Usage{Total: 1000, Free: 500})
	waitFor(t, 20*time.Second, "writable", func() bool { ro, _ := c.Server(0).ReadOnly(); return !ro })
	if err := add(ctx, cl, 1, 1, []byte("after")); err != nil {
		t.Fatal(err)
	}

	// A really full disk (ENOSPC on write) fails the add, unacknowledged.
	ffs.SetUsage(nil)
	c.Server(0).Config() // no-op; keep the same server
	ffs.SetDiskFull(true)
	err := add(ctx, cl, 1, 2, []byte("nospace"))
	if !errors.Is(err, bookie.ErrIO) && !errors.Is(err, bookie.ErrReadOnly) {
		t.Fatalf("add on full disk: %v", err)
	}
	waitFor(t, 20*time.Second, "read-only", func() bool { ro, _ := c.Server(0).ReadOnly(); return ro })
	if _, err := read(ctx, cl, 1, 2); !errors.Is(err, bookie.ErrNoSuchEntry) {
		t.Fatalf("unacked entry readable: %v", err)
	}
	for e := int64(0); e < 2; e++ {
		if _, err := read(ctx, cl, 1, e); err != nil {
			t.Fatalf("acked entry %d: %v", e, err)
		}
	}
}

// POST /debug/faults drives the fault layer of a running bookie.
func TestFaultHTTPEndpoint(t *testing.T) {
	c := bookietest.StartCluster(t, 1, bookietest.WithConfig(func(i int, cfg *bookie.Config) {
		cfg.Testing.FaultHTTP = true
	}))
	ctx := ctxT(t)
	url := "http://" + c.Server(0).HTTPAddr() + "/debug/faults"
	resp, err := http.Post(url, "text/plain", strings.NewReader("fail sync journal"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if err := add(ctx, c.Client(0), 1, 0, []byte("x")); !errors.Is(err, bookie.ErrIO) {
		t.Fatalf("add with failing fsync: %v", err)
	}
	resp, err = http.Post(url, "text/plain", strings.NewReader("explode"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("bad command status %d", resp.StatusCode)
	}
	r, err := http.Get("http://" + c.Server(0).HTTPAddr() + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	r.Body.Close()
	if r.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("/readyz of a read-only bookie: %d", r.StatusCode)
	}
}
