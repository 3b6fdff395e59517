package client

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// clientMetrics are the client's Prometheus metrics. With no Registerer
// they are still updated but never exported.
type clientMetrics struct {
	sent       prometheus.Counter
	sentBytes  prometheus.Counter
	sendErrors prometheus.Counter
	latency    prometheus.Histogram
	received   prometheus.Counter
	duplicates prometheus.Counter
	reconnects *prometheus.CounterVec
	stalls     prometheus.Counter
	// deadLettered, nacked: dlq.go, nack.go.
	deadLettered prometheus.Counter
	nacked       prometheus.Counter
	// poison counts undecodable entries by reason (poison.go).
	poison *prometheus.CounterVec

	failovers     *prometheus.CounterVec
	switchSeconds prometheus.Histogram
	regionUp      *prometheus.GaugeVec
	// targetStale, targetIgnored: the controlled policy (failover.go).
	targetStale   prometheus.Gauge
	targetIgnored prometheus.Counter
}

func newClientMetrics(reg prometheus.Registerer) *clientMetrics {
	m := &clientMetrics{
		sent: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "meridian_client_messages_sent_total", Help: "Messages acknowledged by the broker."}),
		sentBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "meridian_client_bytes_sent_total", Help: "Payload bytes of acknowledged messages."}),
		sendErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "meridian_client_send_errors_total", Help: "Messages resolved with an error (timeouts included)."}),
		// Buckets 0.25 ms .. ~8 s doubling: loopback acks take well under a
		// millisecond, a reconnect after a broker crash several seconds.
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "meridian_client_send_latency_seconds", Help: "Time from SendAsync accepting a message to its acknowledgement.",
			Buckets: prometheus.ExponentialBuckets(0.00025, 2, 16)}),
		received: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "meridian_client_messages_received_total", Help: "Messages returned by Receive."}),
		duplicates: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "meridian_client_duplicate_batches_total", Help: "Resent batches the broker had already stored."}),
		reconnects: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meridian_client_reconnects_total", Help: "Successful reconnections after a broken stream."}, []string{"kind"}),
		stalls: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "meridian_client_producer_stalls_total", Help: "Produce streams dropped after repeated send timeouts (the producer then looks the topic up again)."}),
		deadLettered: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "meridian_client_messages_dead_lettered_total", Help: "Messages written to a dead-letter topic and acknowledged on their own."}),
		poison: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meridian_client_poison_entries_total", Help: "Entries the consumer could not decode (poison pills), dead-lettered or acknowledged with their reason."}, []string{"reason", "action"}),
		nacked: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "meridian_client_messages_nacked_total", Help: "Negative acknowledgements (Nack calls)."}),
		failovers: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meridian_client_failovers_total", Help: "Region switches of multi-region clients."}, []string{"from", "to"}),
		// Buckets 50 ms .. ~100 s doubling: a controlled switch takes a
		// probe interval plus a reconnect, an automatic one several failed
		// probes; the target is under 10 s.
		switchSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "meridian_client_failover_switch_seconds", Help: "Time from a failover's cause (first failed probe, operator change) to the first stream reconnected in the new region.",
			Buckets: prometheus.ExponentialBuckets(0.05, 2, 12)}),
		regionUp: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "meridian_client_region_up", Help: "1 when the last probe of the region succeeded (automatic failover)."}, []string{"region"}),
		targetStale: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "meridian_client_failover_target_stale", Help: "1 when the last failover group target read was a broker's last seen copy (its region could not reach the global metadata)."}),
		targetIgnored: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "meridian_client_failover_target_ignored_total", Help: "Failover group target answers ignored because their version was lower than one already seen (a stale region)."}),
	}
	if reg != nil {
		m.sent = register(reg, m.sent)
		m.sentBytes = register(reg, m.sentBytes)
		m.sendErrors = register(reg, m.sendErrors)
		m.latency = register(reg, m.latency)
		m.received = register(reg, m.received)
		m.duplicates = register(reg, m.duplicates)
		m.reconnects = register(reg, m.reconnects)
		m.stalls = register(reg, m.stalls)
		m.deadLettered = register(reg, m.deadLettered)
		m.nacked = register(reg, m.nacked)
		m.poison = register(reg, m.poison)
		m.failovers = register(reg, m.failovers)
		m.switchSeconds = register(reg, m.switchSeconds)
		m.regionUp = register(reg, m.regionUp)
		m.targetStale = register(reg, m.targetStale)
		m.targetIgnored = register(reg, m.targetIgnored)
	}
	return m
}

// register registers c, or reuses the collector already registered under
// the same name (several clients may share one registry).
func register[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing
			}
		}
	}
	return c
}

// observeSend records one resolved message.
func (m *clientMetrics) observeSend(accepted time.Time, size int, err error) {
	if err != nil {
		m.sendErrors.Inc()
		return
	}
	m.sent.Inc()
	m.sentBytes.Add(float64(size))
	m.latency.Observe(time.Since(accepted).Seconds())
}
