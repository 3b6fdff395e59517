package broker

import "github.com/prometheus/client_golang/prometheus"

// subSyncCollector reports the replicated subscriptions' acknowledgement
// shipping per remote region at scrape time, over the topics this broker
// owns. Per topic and subscription the same figures are in the topic stats
// (SubscriptionStats.ack_replication): labels stay bounded (remote region
// only), like the replicators' metrics.
type subSyncCollector struct{ s *Server }

var (
	subSyncLagDesc = prometheus.NewDesc("meridian_subscription_ack_replication_lag_seconds",
		"Age of the oldest acknowledgement of a replicated subscription the remote region has not confirmed, largest over the owned topics.", []string{"remote"}, nil)
	subSyncRangesDesc = prometheus.NewDesc("meridian_subscription_ack_replication_pending_ranges",
		"Acknowledged ranges of replicated subscriptions the remote region has not confirmed, summed over the owned topics.", []string{"remote"}, nil)
	subSyncAcksDesc = prometheus.NewDesc("meridian_subscription_ack_replication_pending_acks",
		"Acknowledged entries of replicated subscriptions the remote region has not confirmed, summed over the owned topics.", []string{"remote"}, nil)
	subSyncConnectedDesc = prometheus.NewDesc("meridian_subscription_ack_replication_connected",
		"Topics whose replicated-subscription stream to the remote region is open.", []string{"remote"}, nil)
)

func (c *subSyncCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{subSyncLagDesc, subSyncRangesDesc, subSyncAcksDesc, subSyncConnectedDesc} {
		ch <- d
	}
}

func (c *subSyncCollector) Collect(ch chan<- prometheus.Metric) {
	type agg struct{ lag, ranges, acks, connected float64 }
	per := map[string]*agg{}
	for _, t := range c.s.loadedTopics() {
		senders := t.subsync.senderList()
		if len(senders) == 0 {
			continue
		}
		for _, x := range senders {
			a := per[x.remote]
			if a == nil {
				a = &agg{}
				per[x.remote] = a
			}
			if x.isConnected() {
				a.connected++
			}
		}
		for _, s := range t.subList() {
			for _, st := range t.ackReplicationStats(s) {
				if a := per[st.Region]; a != nil {
					a.lag = max(a.lag, st.LagSeconds)
					a.ranges += float64(st.PendingRanges)
					a.acks += float64(st.PendingAcks)
				}
			}
		}
	}
	for r, a := range per {
		ch <- prometheus.MustNewConstMetric(subSyncLagDesc, prometheus.GaugeValue, a.lag, r)
		ch <- prometheus.MustNewConstMetric(subSyncRangesDesc, prometheus.GaugeValue, a.ranges, r)
		ch <- prometheus.MustNewConstMetric(subSyncAcksDesc, prometheus.GaugeValue, a.acks, r)
		ch <- prometheus.MustNewConstMetric(subSyncConnectedDesc, prometheus.GaugeValue, a.connected, r)
	}
}
