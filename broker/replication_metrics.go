package broker

import "github.com/prometheus/client_golang/prometheus"

// replCollector reports the replicators' gauges per remote region at
// scrape time, summed (lag: the largest) over the topics this broker owns.
type replCollector struct{ s *Server }

var (
	replBacklogMsgsDesc = prometheus.NewDesc("meridian_replication_backlog_messages",
		"Entries not yet replicated to the remote region (after the replicators' cursors), over the owned topics.", []string{"remote"}, nil)
	replBacklogBytesDesc = prometheus.NewDesc("meridian_replication_backlog_bytes",
		"Bytes not yet replicated to the remote region (estimated from ledger sizes), over the owned topics.", []string{"remote"}, nil)
	replLagDesc = prometheus.NewDesc("meridian_replication_lag_seconds",
		"Age of the oldest entry not yet replicated to the remote region, largest over the owned topics.", []string{"remote"}, nil)
	replStalledDesc = prometheus.NewDesc("meridian_replication_stalled",
		"Replicators to the remote region that have backlog and made no progress for the stall timeout.", []string{"remote"}, nil)
	replConnectedDesc = prometheus.NewDesc("meridian_replication_connected",
		"Replicators to the remote region with a replication stream open.", []string{"remote"}, nil)
)

func (c *replCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{replBacklogMsgsDesc, replBacklogBytesDesc, replLagDesc, replStalledDesc, replConnectedDesc} {
		ch <- d
	}
}

func (c *replCollector) Collect(ch chan<- prometheus.Metric) {
	type agg struct{ msgs, bytes, lag, stalled, connected float64 }
	per := map[string]*agg{}
	for _, t := range c.s.loadedTopics() {
		for _, x := range t.replicators.list() {
			st := x.r.Status()
			a := per[st.Remote]
			if a == nil {
				a = &agg{}
				per[st.Remote] = a
			}
			a.msgs += float64(st.BacklogEntries)
			a.bytes += float64(st.BacklogBytes)
			a.lag = max(a.lag, st.LagSeconds)
			if st.Stalled {
				a.stalled++
			}
			if st.Connected {
				a.connected++
			}
		}
	}
	for r, a := range per {
		ch <- prometheus.MustNewConstMetric(replBacklogMsgsDesc, prometheus.GaugeValue, a.msgs, r)
		ch <- prometheus.MustNewConstMetric(replBacklogBytesDesc, prometheus.GaugeValue, a.bytes, r)
		ch <- prometheus.MustNewConstMetric(replLagDesc, prometheus.GaugeValue, a.lag, r)
		ch <- prometheus.MustNewConstMetric(replStalledDesc, prometheus.GaugeValue, a.stalled, r)
		ch <- prometheus.MustNewConstMetric(replConnectedDesc, prometheus.GaugeValue, a.connected, r)
	}
}
