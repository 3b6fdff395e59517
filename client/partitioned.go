package client

import (
	"context"
	"fmt"
	"strconv"
	"time"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Partitioned topics (issue 10).
//
// A partitioned topic "t/ns/x" with N partitions is N ordinary topics
// "t/ns/x-partition-0" .. "-partition-<N-1>" plus a global record of N.
// NewProducer and Subscribe ask a broker for the count (GetPartitions);
// for a partitioned topic they return a Producer or Consumer that holds
// one per partition and routes to them (partitioned_producer.go,
// partitioned_consumer.go): the caller's code is the same as for a plain
// topic. A raise of the count is picked up every
// PartitionsAutoDiscoveryInterval.

// DefaultPartitionsAutoDiscoveryInterval is how often a partitioned
// producer or consumer checks for new partitions (Pulsar's default).
const DefaultPartitionsAutoDiscoveryInterval = time.Minute

// minPartitionsAutoDiscoveryInterval bounds the check's load on brokers.
const minPartitionsAutoDiscoveryInterval = 100 * time.Millisecond

// PartitionTopic returns the name of partition i of topic.
func PartitionTopic(topic string, i int) string {
	return topic + "-partition-" + strconv.Itoa(i)
}

// discoveryInterval validates and defaults PartitionsAutoDiscoveryInterval.
func discoveryInterval(d time.Duration) (time.Duration, error) {
	switch {
	case d == 0:
		return DefaultPartitionsAutoDiscoveryInterval, nil
	case d < minPartitionsAutoDiscoveryInterval:
		return 0, fmt.Errorf("%w: PartitionsAutoDiscoveryInterval %v is below the minimum %v (0 = default %v)", ErrInvalidArgument, d, minPartitionsAutoDiscoveryInterval, DefaultPartitionsAutoDiscoveryInterval)
	}
	return d, nil
}

// Partitions returns topic's partition count: 0 for a topic that is not
// partitioned (also when the broker predates partitioned topics). It asks
// a broker of the active region, retrying transient failures (trying the
// region's other brokers, following a region switch) until ctx ends.
func (c *Client) Partitions(ctx context.Context, topic string) (int, error) {
	bo := newBackoff(c.opts.InitialBackoff, c.opts.MaxBackoff)
	for {
		actx, cancel := c.attemptCtx(ctx)
		n, err := c.partitionsOnce(actx, topic)
		switched := actx.Err() != nil && ctx.Err() == nil
		cancel()
		if err == nil {
			return n, nil
		}
		if switched {
			bo.reset()
			continue
		}
		if !retryable(err) {
			return 0, userError(err)
		}
		if werr := c.waitRetry(ctx, bo); werr != nil {
			return 0, fmt.Errorf("%w: partitions of %s: %v (last error: %v)", ErrUnavailable, topic, werr, err)
		}
	}
}

// partitionsOnce tries each known broker of the active region once.
func (c *Client) partitionsOnce(ctx context.Context, topic string) (int, error) {
	if err := c.checkOpen(); err != nil {
		return 0, err
	}
	c.mu.Lock()
	ri := c.active
	cands := append([]string(nil), c.regions[ri].known...)
	c.mu.Unlock()
	var last error
	for _, addr := range cands {
		api, err := c.api(addr)
		if err != nil {
			return 0, err
		}
		rctx, cancel := context.WithTimeout(ctx, c.opts.ConnectTimeout)
		resp, err := api.GetPartitions(rctx, &clientv1.GetPartitionsRequest{Topic: topic})
		cancel()
		if err == nil {
			return int(resp.GetPartitions()), nil
		}
		if status.Code(err) == codes.Unimplemented {
			return 0, nil // a broker without partitioned topics has none
		}
		last = mapError(err)
		if !retryable(last) || ctx.Err() != nil {
			return 0, last
		}
	}
	if last == nil {
		last = fmt.Errorf("%w: no broker address known", ErrUnavailable)
	}
	return 0, last
}
