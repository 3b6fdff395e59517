package client_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/meridianmq/meridian/client"
)

// This file duplicates produceKeylessN of branch acks (client/e2e_acks_test.go)
// so that branch keyshared builds alone: delete it when both are merged.

// produceKeylessN is produceN without keys (the producer closes a batch
// when the key changes, so keyed messages do not batch together).
func produceKeylessN(t *testing.T, p *client.Producer, first, n int) []client.MessageID {
	t.Helper()
	ctx := tctx(t, 60*time.Second)
	ids := make([]client.MessageID, n)
	var mu sync.Mutex
	var firstErr error
	for i := range n {
		p.SendAsync(ctx, &client.Message{Payload: fmt.Appendf(nil, "m%d", first+i)},
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
