package region_test

import (
	"testing"
	"time"

	"github.com/meridianmq/meridian/broker"
	"github.com/prometheus/client_golang/prometheus"
)

// TestGeoRelayDoesNotWaitOnSlowOrigin: a's stream to c stays connected but
// c applies its requests one a second (a receiver knob), so a counts as
// direct at c while delivering one or two entries a second. The relay b
// holds a's entries only max_relay_wait (1 s) and then ships them itself:
// c has every acknowledged message long before a's own stream could have
// delivered them (over a minute), nothing is lost, stored once each, in
// order; the copies a's stream delivers later are answered DUPLICATE
// (counted). Before, b held a's entries for as long as a stayed connected.
func TestGeoRelayDoesNotWaitOnSlowOrigin(t *testing.T) {
	names := []string{"a", "b", "c"}
	var cMetrics prometheus.Gatherer
	g, topic := geoSetup(t, names, geoOptions{broker: func(region string, _ int, cfg *broker.Config) {
		cfg.Replication.MaxRelayWait = time.Second
		if region == "c" {
			cMetrics = cfg.Gatherer
			cfg.Testing.ReplRequestDelay = func(_, source string) time.Duration {
				if source == "a" {
					return time.Second
				}
				return 0
			}
		}
	}})
	var readers []*geoReader
	for _, n := range names {
		readers = append(readers, g.reader(n, topic))
	}
	pa := g.producer("a", topic)
	// 150 entries, one at a time: a's replicator ships each in its own
	// request, which c applies one a second (about 150 s).
	for range 150 {
		pa.send(1)
		time.Sleep(10 * time.Millisecond)
	}
	g.converge(30*time.Second, readers, []*geoProducer{pa})
	received := map[string]float64{}
	mfs, err := cMetrics.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "meridian_replication_received_entries_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			lbl := map[string]string{}
			for _, l := range m.GetLabel() {
				lbl[l.GetName()] = l.GetValue()
			}
			if lbl["origin"] == "a" {
				received[lbl["result"]] += m.GetCounter().GetValue()
			}
		}
	}
	t.Logf("c received a's entries so far: %v (duplicates: copies a's slow stream or a relay delivered second)", received)
}
