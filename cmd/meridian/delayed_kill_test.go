package main

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/meridianmq/meridian/client"
)

// TestDelayedDeliverySurvivesKill9: delayed messages acknowledged by a
// `meridian standalone` process survive its SIGKILL and restart on the
// same data directory: the restarted broker re-reads them from the
// subscription's position, holds them again, and delivers every one, none
// before its time.
func TestDelayedDeliverySurvivesKill9(t *testing.T) {
	dir := t.TempDir()
	grpcAddr, httpAddr := cliFreeAddr(t), cliFreeAddr(t)
	args := []string{"standalone", "--data-dir", filepath.Join(dir, "data"), "--grpc", grpcAddr, "--http", httpAddr}
	proc := startProc(t, "standalone", args...)
	waitHTTP(t, proc, "http://"+httpAddr+"/readyz", 90*time.Second)

	ctx, cancel := context.WithTimeout(context.Background(), 180*time.Second)
	defer cancel()
	c, err := client.New(ctx, client.Options{URL: grpcAddr, MaxBackoff: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close(context.Background()) }()
	const topic = "public/default/delayed-kill9"
	co, err := c.Subscribe(ctx, client.ConsumerOptions{Topic: topic, Subscription: "s", Type: client.Shared, InitialPosition: client.Earliest})
	if err != nil {
		t.Fatal(err)
	}
	p, err := c.NewProducer(ctx, client.ProducerOptions{Topic: topic, BatchingMaxMessages: 4, SendTimeout: 120 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	due := map[string]time.Time{}
	const n = 45
	for i := range n {
		pl := fmt.Sprintf("m%d", i)
		m := &client.Message{Key: fmt.Sprintf("k%d", i%3), Payload: []byte(pl)}
		now := time.Now()
		due[pl] = now
		switch i % 3 {
		case 1:
			m.DeliverAfter = 5 * time.Second
		case 2:
			m.DeliverAfter = 15 * time.Second
		}
		if m.DeliverAfter > 0 {
			due[pl] = now.Add(m.DeliverAfter).Truncate(time.Millisecond)
		}
		p.SendAsync(ctx, m, nil)
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err) // all acknowledged by the broker
	}
	seen := map[string]int{}
	receive := func(want int, what string) {
		t.Helper()
		for len(seen) < want {
			m, err := co.Receive(ctx)
			if err != nil {
				t.Fatalf("%s: %d of %d received: %v", what, len(seen), want, err)
			}
			pl := string(m.Payload)
			if now := time.Now(); now.Before(due[pl]) {
				t.Errorf("%s: %s delivered %v early", what, pl, due[pl].Sub(now))
			}
			seen[pl]++
			_ = co.Ack(ctx, m.ID)
		}
	}
	receive(n/3, "before the kill") // the undelayed ones
	proc.kill()                     // SIGKILL: nothing flushed, no cursor persisted since the last tick
	killed := time.Now()
	proc = startProc(t, "standalone", args...)
	waitHTTP(t, proc, "http://"+httpAddr+"/readyz", 90*time.Second)
	t.Logf("restarted %v after the SIGKILL", time.Since(killed).Round(time.Millisecond))
	receive(n, "after the restart")
	// Redeliveries of acknowledgements lost with the process, if any.
	dups := 0
	for {
		rctx, rcancel := context.WithTimeout(ctx, time.Second)
		m, err := co.Receive(rctx)
		rcancel()
		if err != nil {
			break
		}
		pl := string(m.Payload)
		if time.Now().Before(due[pl]) {
			t.Errorf("duplicate %s delivered early", pl)
		}
		seen[pl]++
		_ = co.Ack(ctx, m.ID)
	}
	for _, k := range seen {
		dups += k - 1
	}
	t.Logf("all %d messages delivered after kill -9, none early; %d duplicates", n, dups)
}
