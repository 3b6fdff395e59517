package broker_test

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/meridianmq/meridian/broker"
	"github.com/meridianmq/meridian/region/regiontest"
)

// lockedBuffer is a bytes.Buffer safe for concurrent loggers.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestStartWarnsWithoutSpareBookie: on three bookies, a broker whose
// default ensemble is 3 warns at start that a single bookie outage stops
// writes; one whose default ensemble is 2 has a spare and does not.
func TestStartWarnsWithoutSpareBookie(t *testing.T) {
	logs := []*lockedBuffer{{}, {}}
	regiontest.Start(t, regiontest.Options{Brokers: 2, Bookies: 3, Broker: func(i int, c *broker.Config) {
		c.Logger = slog.New(slog.NewTextHandler(logs[i], nil))
		if i == 1 {
			c.DefaultEnsembleSize = 2
		}
	}})
	if l := logs[0].String(); !strings.Contains(l, "no spare bookie") || !strings.Contains(l, "writable_bookies=3") {
		t.Fatalf("E=3 on 3 bookies: no warning at start:\n%s", l)
	}
	if l := logs[1].String(); strings.Contains(l, "no spare bookie") {
		t.Fatalf("E=2 on 3 bookies warned:\n%s", l)
	}
}
