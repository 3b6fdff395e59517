package autorecovery

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// auditorMetrics are exported by an Auditor. Only the leader reports the
// under-replicated count (non-leaders report 0), so a sum over processes is
// the region's count.
type auditorMetrics struct {
	underReplicated prometheus.Gauge
	leader          prometheus.Gauge
	scans           prometheus.Counter
	marked          prometheus.Counter
}

func newAuditorMetrics(reg prometheus.Registerer) (*auditorMetrics, error) {
	m := &auditorMetrics{
		underReplicated: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "meridian_autorecovery_under_replicated_ledgers",
			Help: "Closed ledgers marked under-replicated and not yet repaired (reported by the auditor leader).",
		}),
		leader: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "meridian_autorecovery_auditor_leader",
			Help: "1 while this process is the region's autorecovery auditor, else 0.",
		}),
		scans: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "meridian_autorecovery_audit_scans_total",
			Help: "Full scans of the ledger metadata made by this auditor.",
		}),
		marked: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "meridian_autorecovery_ledgers_marked_total",
			Help: "Under-replicated marks created or extended by this auditor.",
		}),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []*prometheus.Gauge{&m.underReplicated, &m.leader} {
		g, err := registerOrExisting(reg, *c)
		if err != nil {
			return nil, err
		}
		*c = g
	}
	for _, c := range []*prometheus.Counter{&m.scans, &m.marked} {
		g, err := registerOrExisting(reg, *c)
		if err != nil {
			return nil, err
		}
		*c = g
	}
	return m, nil
}

// workerMetrics are exported by a Worker.
type workerMetrics struct {
	ledgers  prometheus.Counter
	segments prometheus.Counter
	entries  prometheus.Counter
	bytes    prometheus.Counter
	failures prometheus.Counter
}

func newWorkerMetrics(reg prometheus.Registerer) (*workerMetrics, error) {
	m := &workerMetrics{
		ledgers: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "meridian_autorecovery_rereplicated_ledgers_total",
			Help: "Under-replicated ledgers this process repaired (mark resolved after at least one bookie swap).",
		}),
		segments: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "meridian_autorecovery_rereplicated_segments_total",
			Help: "Ledger segments whose lost bookie was replaced by this process.",
		}),
		entries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "meridian_autorecovery_rereplicated_entries_total",
			Help: "Entries copied to replacement bookies by this process.",
		}),
		bytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "meridian_autorecovery_rereplicated_bytes_total",
			Help: "Entry payload bytes copied to replacement bookies by this process.",
		}),
		failures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "meridian_autorecovery_rereplication_failures_total",
			Help: "Attempts to repair a ledger that failed and will be retried.",
		}),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []*prometheus.Counter{&m.ledgers, &m.segments, &m.entries, &m.bytes, &m.failures} {
		g, err := registerOrExisting(reg, *c)
		if err != nil {
			return nil, err
		}
		*c = g
	}
	return m, nil
}

// registerOrExisting registers c or returns the collector already registered
// under its name, so several workers (or an auditor and a worker) can share
// a registerer.
func registerOrExisting[T prometheus.Collector](reg prometheus.Registerer, c T) (T, error) {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(T); ok {
				return existing, nil
			}
		}
		var zero T
		return zero, fmt.Errorf("autorecovery: register metrics: %w", err)
	}
	return c, nil
}
