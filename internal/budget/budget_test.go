package budget

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"time"
)

// waitUntil polls cond until it holds or 10 s pass.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestAcquireWaitsUntilReleased(t *testing.T) {
	b := New(100)
	ctx := context.Background()
	if err := b.Acquire(ctx, 60); err != nil {
		t.Fatal(err)
	}
	if b.TryAcquire(50) {
		t.Fatal("TryAcquire(50) succeeded with 60 of 100 held")
	}
	got := make(chan error, 1)
	go func() { got <- b.Acquire(ctx, 50) }()
	waitUntil(t, "a waiter", func() bool { return b.Waiting() == 1 })
	select {
	case err := <-got:
		t.Fatalf("Acquire(50) returned %v with 60 of 100 held", err)
	default:
	}
	b.Release(60)
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if b.InUse() != 50 || b.Peak() != 60 {
		t.Fatalf("in use %d, peak %d; want 50, 60", b.InUse(), b.Peak())
	}
}

// An item larger than the whole budget goes through once nothing is held
// (never deadlocks), and alone.
func TestOversizedGoesThroughWhenEmpty(t *testing.T) {
	b := New(10)
	ctx := context.Background()
	if err := b.Acquire(ctx, 1000); err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() { got <- b.Acquire(ctx, 1) }()
	waitUntil(t, "a waiter", func() bool { return b.Waiting() == 1 })
	b.Release(1000)
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	// Held 1: the next oversized waits for it.
	go func() { got <- b.Acquire(ctx, 1000) }()
	waitUntil(t, "a waiter", func() bool { return b.Waiting() == 1 })
	b.Release(1)
	if err := <-got; err != nil {
		t.Fatal(err)
	}
}

// Waiters are served in order: small acquires arriving after a large one
// do not overtake it.
func TestFIFO(t *testing.T) {
	b := New(100)
	ctx := context.Background()
	if err := b.Acquire(ctx, 90); err != nil {
		t.Fatal(err)
	}
	big := make(chan error, 1)
	go func() { big <- b.Acquire(ctx, 80) }()
	waitUntil(t, "the large waiter", func() bool { return b.Waiting() == 1 })
	if b.TryAcquire(5) {
		t.Fatal("TryAcquire(5) overtook a waiter")
	}
	small := make(chan error, 1)
	go func() { small <- b.Acquire(ctx, 5) }()
	waitUntil(t, "the small waiter", func() bool { return b.Waiting() == 2 })
	b.Release(90)
	if err := <-big; err != nil {
		t.Fatal(err)
	}
	if err := <-small; err != nil {
		t.Fatal(err)
	}
	if b.InUse() != 85 {
		t.Fatalf("in use %d, want 85", b.InUse())
	}
}

// A waiter whose context ends takes nothing, and the waiters behind it
// move on.
func TestCanceledWaiterTakesNothing(t *testing.T) {
	b := New(100)
	if err := b.Acquire(context.Background(), 50); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	first := make(chan error, 1)
	go func() { first <- b.Acquire(ctx, 80) }()
	waitUntil(t, "the first waiter", func() bool { return b.Waiting() == 1 })
	second := make(chan error, 1)
	go func() { second <- b.Acquire(context.Background(), 40) }()
	waitUntil(t, "the second waiter", func() bool { return b.Waiting() == 2 })
	cancel()
	if err := <-first; !errors.Is(err, context.Canceled) {
		t.Fatalf("first: %v, want context.Canceled", err)
	}
	if err := <-second; err != nil {
		t.Fatal(err)
	}
	if b.InUse() != 90 {
		t.Fatalf("in use %d, want 90", b.InUse())
	}
	if err := b.Acquire(ctx, 20); !errors.Is(err, context.Canceled) {
		t.Fatalf("Acquire on an ended context with the budget full: %v", err)
	}
}

// Under concurrent use the bytes held never exceed max(limit, the largest
// item) and everything is given back.
func TestConcurrentNeverExceeds(t *testing.T) {
	const limit, workers, rounds = 1000, 8, 500
	b := New(limit)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 1))
			for range rounds {
				n := r.Int64N(limit) + 1
				if err := b.Acquire(context.Background(), n); err != nil {
					t.Error(err)
					return
				}
				if u := b.InUse(); u > limit {
					t.Errorf("in use %d > limit %d", u, limit)
				}
				b.Release(n)
			}
		}()
	}
	wg.Wait()
	if b.InUse() != 0 || b.Peak() > limit {
		t.Fatalf("in use %d, peak %d (limit %d)", b.InUse(), b.Peak(), limit)
	}
}
