package broker

import (
	"container/heap"
	"sync"
	"time"
)

// The broker-wide scheduler of periodic topic work.
//
// Every loaded topic has periodic work: persist its dirty cursors (every
// cursor persist interval, 1 s by default), run retention (every
// RetentionInterval), the backlog pass (every BacklogPolicyInterval) and
// the poll for a changed policy (every 500 ms). Done with a goroutine and
// tickers per topic, 100 000 idle topics would hold 200 000 goroutines
// (stacks) and 400 000 runtime timers waking ~300 000 goroutines a second
// to find nothing to do. Instead each topic puts its due times in one heap
// (topicSched), driven by one goroutine and one timer. A due job's run
// function is called on that goroutine: it must not block (it takes short
// locks at most); real work (a metadata write, a retention pass, a backlog
// round) runs on a goroutine it starts, which exists only while the work
// runs, and which schedules the job again when done. So a topic never
// runs two rounds of one job at once, as with its own goroutine before.

// schedJob is one periodic job in a topicSched.
type schedJob struct {
	// run is called on the scheduler's goroutine once the job is due (it
	// is then no longer scheduled). It must not block.
	run func(now time.Time)
	// due and idx are guarded by the scheduler's mu: due is in
	// nanoseconds since the scheduler's epoch (monotonic: an integer
	// comparison, the heap's hot spot with 100 000s of jobs); idx is the
	// position in the heap, -1 when not scheduled.
	due int64
	idx int
}

// maxDueBatch bounds the jobs taken from the heap at once, so that a
// burst of due jobs does not hold the scheduler's lock for long.
const maxDueBatch = 1024

// topicSched runs due schedJobs. The zero value is not usable; see
// newTopicSched. Safe for concurrent use.
type topicSched struct {
	// mu guards the fields below and every scheduled job's due and idx.
	mu      sync.Mutex
	jobs    jobHeap
	started bool
	stopped bool

	epoch time.Time     // due times are counted from it
	wake  chan struct{} // capacity 1: the earliest due time moved earlier
	stop  chan struct{}
	done  chan struct{}
}

func newTopicSched() *topicSched {
	return &topicSched{wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}), epoch: time.Now()}
}

// newSchedJob returns a job that calls run when due.
func newSchedJob(run func(now time.Time)) schedJob { return schedJob{run: run, idx: -1} }

// at schedules j to run at due (now or in the past: as soon as possible),
// moving it if it is already scheduled. After close it does nothing.
func (s *topicSched) at(j *schedJob, due time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return
	}
	if !s.started {
		s.started = true
		go s.loop()
	}
	j.due = int64(due.Sub(s.epoch))
	if j.idx >= 0 {
		s.jobs[j.idx].due = j.due
		heap.Fix(&s.jobs, j.idx)
	} else {
		heap.Push(&s.jobs, j)
	}
	if j.idx == 0 {
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
}

// cancel unschedules j (if scheduled). A run already taken from the heap
// may still be called: the job's run must check its owner's state.
func (s *topicSched) cancel(j *schedJob) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if j.idx >= 0 {
		heap.Remove(&s.jobs, j.idx)
	}
}

// len returns the number of scheduled jobs.
func (s *topicSched) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.jobs)
}

// close stops the scheduler's goroutine and waits for it; jobs are no
// longer run, and at does nothing any more.
func (s *topicSched) close() {
	s.mu.Lock()
	started := s.started
	if !s.stopped {
		s.stopped = true
		close(s.stop)
	}
	s.mu.Unlock()
	if started {
		<-s.done
	}
}

func (s *topicSched) loop() {
	defer close(s.done)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var due []*schedJob
	for {
		s.mu.Lock()
		now := time.Now()
		nowNs := int64(now.Sub(s.epoch))
		due = due[:0]
		for len(s.jobs) > 0 && s.jobs[0].due <= nowNs && len(due) < maxDueBatch {
			due = append(due, heap.Pop(&s.jobs).(*schedJob))
		}
		wait := time.Duration(-1)
		if len(s.jobs) > 0 {
			wait = time.Duration(s.jobs[0].due - nowNs)
		}
		s.mu.Unlock()
		if len(due) > 0 {
			for i, j := range due {
				j.run(now)
				due[i] = nil
			}
			select {
			case <-s.stop:
				return
			default:
			}
			continue // a run may have scheduled a job due now
		}
		var tc <-chan time.Time
		if wait >= 0 {
			timer.Reset(wait)
			tc = timer.C
		}
		select {
		case <-tc:
		case <-s.wake:
			timer.Stop()
		case <-s.stop:
			return
		}
	}
}

// jobHeap orders jobs by due time (container/heap). The due time is kept
// in the slice beside the job, so comparisons read contiguous memory, not
// one job per comparison (with 100 000s of jobs, cache misses were most of
// the heap's cost).
type jobHeap []heapEntry

type heapEntry struct {
	due int64
	j   *schedJob
}

func (h jobHeap) Len() int           { return len(h) }
func (h jobHeap) Less(i, j int) bool { return h[i].due < h[j].due }
func (h jobHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].j.idx = i
	h[j].j.idx = j
}

func (h *jobHeap) Push(x any) {
	j := x.(*schedJob)
	j.idx = len(*h)
	*h = append(*h, heapEntry{due: j.due, j: j})
}

func (h *jobHeap) Pop() any {
	old := *h
	n := len(old)
	j := old[n-1].j
	old[n-1] = heapEntry{}
	j.idx = -1
	*h = old[:n-1]
	return j
}

// nextTick returns the first time after now on the grid next + k×period
// (k ≥ 0) — where a time.Ticker whose tick at next was taken ticks next.
func nextTick(next time.Time, period time.Duration, now time.Time) time.Time {
	if next.After(now) {
		return next
	}
	k := now.Sub(next)/period + 1
	return next.Add(k * period)
}
