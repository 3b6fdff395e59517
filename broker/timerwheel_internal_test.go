package broker

import (
	"sync"
	"testing"
	"time"
)

// TestTopicSchedRunsDueJobsInOrder: jobs run once each, in due order, a
// cancelled job never runs, a moved job runs at its new time, and after
// close nothing runs or is scheduled.
func TestTopicSchedRunsDueJobsInOrder(t *testing.T) {
	s := newTopicSched()
	var mu sync.Mutex
	var order []int
	ran := make(chan int, 16)
	jobs := make([]schedJob, 6)
	for i := range jobs {
		jobs[i] = newSchedJob(func(time.Time) {
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			ran <- i
		})
	}
	now := time.Now()
	// Due in reverse index order; job 2 is cancelled, job 4 moved last.
	for i := range jobs {
		s.at(&jobs[i], now.Add(time.Duration(len(jobs)-i)*20*time.Millisecond))
	}
	s.cancel(&jobs[2])
	s.at(&jobs[4], now.Add(400*time.Millisecond))
	if n := s.len(); n != 5 {
		t.Fatalf("%d jobs scheduled, want 5", n)
	}
	want := []int{5, 3, 1, 0, 4}
	deadline := time.After(30 * time.Second)
	for range want {
		select {
		case <-ran:
		case <-deadline:
			t.Fatalf("jobs did not run in time; ran %v", order)
		}
	}
	mu.Lock()
	got := append([]int(nil), order...)
	mu.Unlock()
	if len(got) != len(want) {
		t.Fatalf("ran %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("ran %v, want %v", got, want)
		}
	}
	if n := s.len(); n != 0 {
		t.Fatalf("%d jobs still scheduled after running", n)
	}
	// A job scheduled in the past runs at once; one that reschedules
	// itself from its run runs again.
	again := 0
	var self schedJob
	self = newSchedJob(func(time.Time) {
		again++
		if again < 3 {
			s.at(&self, time.Now())
			return
		}
		ran <- -1
	})
	s.at(&self, now.Add(-time.Hour))
	select {
	case <-ran:
	case <-time.After(30 * time.Second):
		t.Fatal("a self-rescheduling job did not run three times")
	}
	s.close()
	s.at(&jobs[0], time.Now())
	if n := s.len(); n != 0 {
		t.Fatalf("a job was scheduled after close (%d)", n)
	}
	select {
	case i := <-ran:
		t.Fatalf("job %d ran after close", i)
	case <-time.After(100 * time.Millisecond):
	}
}

// TestNextTick follows time.Ticker: the next grid point after now.
func TestNextTick(t *testing.T) {
	base := time.Unix(1000, 0)
	p := time.Second
	for _, c := range []struct {
		now  time.Duration
		want time.Duration
	}{
		{-time.Millisecond, 0}, // not yet due: unchanged
		{0, time.Second},
		{500 * time.Millisecond, time.Second},
		{time.Second, 2 * time.Second},
		{3500 * time.Millisecond, 4 * time.Second},
	} {
		if got := nextTick(base, p, base.Add(c.now)); !got.Equal(base.Add(c.want)) {
			t.Errorf("nextTick(now=base+%v) = base+%v, want base+%v", c.now, got.Sub(base), c.want)
		}
	}
}
