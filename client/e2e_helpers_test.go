package client_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meridianmq/meridian/broker"
	"github.com/meridianmq/meridian/client"
	"github.com/meridianmq/meridian/region"
)

// tlog routes logs to t.Log.
type tlogWriter struct{ t testing.TB }

func (w tlogWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func testLogger(t testing.TB, lvl slog.Level) *slog.Logger {
	return slog.New(slog.NewTextHandler(tlogWriter{t}, &slog.HandlerOptions{Level: lvl}))
}

// startStandalone runs a whole region in-process on loopback.
func startStandalone(t *testing.T) *region.Standalone {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	sa, err := region.StartStandalone(ctx, region.StandaloneConfig{
		DataDir: t.TempDir(), GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0",
		Logger: testLogger(t, slog.LevelWarn),
		Broker: func(c *broker.Config) { c.CursorPersistInterval = 100 * time.Millisecond },
	})
	if err != nil {
		t.Fatalf("start standalone: %v", err)
	}
	t.Cleanup(func() { _ = sa.Close() })
	return sa
}

func newClient(t *testing.T, url string) *client.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := client.New(ctx, client.Options{URL: url, Logger: testLogger(t, slog.LevelInfo),
		InitialBackoff: 50 * time.Millisecond, MaxBackoff: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = c.Close(ctx)
	})
	return c
}

func tctx(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// produceN sends n messages "m<i>" asynchronously and returns their acked
// IDs in order; it fails the test on any send error.
func produceN(t *testing.T, p *client.Producer, first, n int) []client.MessageID {
	t.Helper()
	ctx := tctx(t, 60*time.Second)
	ids := make([]client.MessageID, n)
	var mu sync.Mutex
	var firstErr error
	for i := range n {
		p.SendAsync(ctx, &client.Message{Key: fmt.Sprintf("k%d", i%3), Payload: fmt.Appendf(nil, "m%d", first+i)},
			func(id client.MessageID, _ *client.Message, err error) {
				mu.Lock()
				defer mu.Unlock()
				if err != nil && firstErr == nil {
					firstErr = err
				}
				ids[i] = id
			})
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if firstErr != nil {
		t.Fatalf("send: %v", firstErr)
	}
	return ids
}

// receiveN receives n messages (failing after d), acking each when ack.
func receiveN(t *testing.T, co *client.Consumer, n int, d time.Duration, ack bool) []*client.ReceivedMessage {
	t.Helper()
	ctx := tctx(t, d)
	var out []*client.ReceivedMessage
	for len(out) < n {
		m, err := co.Receive(ctx)
		if err != nil {
			t.Fatalf("receive %d/%d: %v (got %v)", len(out), n, err, payloads(out))
		}
		out = append(out, m)
		if ack {
			if err := co.Ack(ctx, m.ID); err != nil {
				t.Fatalf("ack %v: %v", m.ID, err)
			}
		}
	}
	return out
}

// expectNothing asserts no message arrives within d.
func expectNothing(t *testing.T, co *client.Consumer, d time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	if m, err := co.Receive(ctx); err == nil {
		t.Fatalf("unexpected message %v %q", m.ID, m.Payload)
	}
}

func payloads(ms []*client.ReceivedMessage) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = string(m.Payload)
	}
	return out
}
