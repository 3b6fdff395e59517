package bookie

import (
	"testing"
	"time"
)

// Corrupt reads are logged at most logBurst times per logWindow; the next
// line logged says how many were suppressed.
func TestLogLimiter(t *testing.T) {
	var l logLimiter
	t0 := time.Unix(1000, 0)
	for i := range logBurst {
		if ok, sup := l.allow(t0.Add(time.Duration(i) * time.Millisecond)); !ok || sup != 0 {
			t.Fatalf("line %d: allowed %v, suppressed %d", i, ok, sup)
		}
	}
	for i := range 7 {
		if ok, _ := l.allow(t0.Add(time.Second + time.Duration(i))); ok {
			t.Fatalf("line %d beyond the burst allowed", logBurst+i)
		}
	}
	if ok, sup := l.allow(t0.Add(logWindow)); !ok || sup != 7 {
		t.Fatalf("next window: allowed %v, suppressed %d, want true, 7", ok, sup)
	}
}
