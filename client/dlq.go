package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
)

// Dead-letter topic.
//
// A consumer with a DeadLetterPolicy never hands the application a
// message delivered with a redelivery count of MaxRedeliveries or more:
// Receive writes the entry's messages not yet acknowledged to the
// dead-letter topic (waiting for the broker's confirmation), then
// acknowledges the entry on the original subscription with
// Ack.dead_letter set (waiting for that answer too), and moves on. The
// order is what makes a crash safe: before the produce is confirmed the
// entry is unacknowledged (redelivered, then dead-lettered again); after it
// the message is in the dead-letter topic, and if the ack is lost it is
// there and redelivered: "in one of them, maybe both, never neither".

// Properties set on a dead-lettered or retried message (Pulsar's names).
const (
	// PropertyRealTopic names the topic the message was first consumed from.
	PropertyRealTopic = "REAL_TOPIC"
	// PropertyOriginMessageID is the message's ID there ("L:E:B").
	PropertyOriginMessageID = "ORIGIN_MESSAGE_ID"
	// PropertySubscription is the subscription that gave up on it.
	PropertySubscription = "REAL_SUBSCRIPTION"
	// PropertyReconsumeTimes counts ReconsumeLater calls (retry.go).
	PropertyReconsumeTimes = "RECONSUMETIMES"
	// PropertyDelayTime is the last ReconsumeLater delay in milliseconds.
	PropertyDelayTime = "DELAY_TIME"
)

// DeadLetterPolicy configures a consumer's dead-letter and retry-letter
// topics.
type DeadLetterPolicy struct {
	// MaxRedeliveries: a message delivered with this redelivery count (or
	// more) goes to the dead-letter topic instead of the application, so
	// the application sees it at most MaxRedeliveries times. With
	// RetryTopic, a message reconsumed this many times goes there too.
	// Range [1, 1 000 000].
	MaxRedeliveries int32
	// Topic is the dead-letter topic. Default "<topic>-<subscription>-DLQ".
	Topic string
	// RetryTopic, when EnableRetry is set, is the retry-letter topic of
	// ReconsumeLater. Default "<topic>-<subscription>-RETRY".
	RetryTopic string
	// EnableRetry turns ReconsumeLater on: the consumer then also
	// subscribes (same subscription name and type) to RetryTopic and
	// receives from both.
	EnableRetry bool
	// RetryDelays, when not empty, are the delay levels of ReconsumeLater
	// with a zero delay: the n-th reconsume waits RetryDelays[min(n,
	// len-1)]. Each in [0, 24h].
	RetryDelays []time.Duration
}

// validate checks p and fills in nothing (names default at use).
func (p *DeadLetterPolicy) validate(o ConsumerOptions) error {
	if p.MaxRedeliveries < 1 || p.MaxRedeliveries > MaxDeadLetterRedeliveries {
		return fmt.Errorf("%w: DeadLetter.MaxRedeliveries %d out of range [1, %d]", ErrInvalidArgument, p.MaxRedeliveries, MaxDeadLetterRedeliveries)
	}
	if p.Topic != "" {
		if err := ValidateTopicName(p.Topic); err != nil {
			return fmt.Errorf("DeadLetter.Topic: %w", err)
		}
		if p.Topic == o.Topic {
			return fmt.Errorf("%w: DeadLetter.Topic %q is the consumer's own topic", ErrInvalidArgument, p.Topic)
		}
	} else if err := ValidateTopicName(p.dlqTopic(o)); err != nil {
		return fmt.Errorf("DeadLetter.Topic (default %q): %w", p.dlqTopic(o), err)
	}
	if p.RetryTopic != "" {
		if err := ValidateTopicName(p.RetryTopic); err != nil {
			return fmt.Errorf("DeadLetter.RetryTopic: %w", err)
		}
	}
	for i, d := range p.RetryDelays {
		if d < 0 || d > MaxNackRedeliveryDelay {
			return fmt.Errorf("%w: DeadLetter.RetryDelays[%d] %v out of range [0, %v]", ErrInvalidArgument, i, d, MaxNackRedeliveryDelay)
		}
	}
	return nil
}

// dlqTopic is the dead-letter topic of a consumer with options o.
func (p *DeadLetterPolicy) dlqTopic(o ConsumerOptions) string {
	if p.Topic != "" {
		return p.Topic
	}
	return o.Topic + "-" + o.Subscription + "-DLQ"
}

// retryTopic is the retry-letter topic of a consumer with options o.
func (p *DeadLetterPolicy) retryTopic(o ConsumerOptions) string {
	if p.RetryTopic != "" {
		return p.RetryTopic
	}
	return o.Topic + "-" + o.Subscription + "-RETRY"
}

// letterProducers lazily opens the consumer's dead-letter and retry
// producers; closed with the consumer.
type letterProducers struct {
	mu    sync.Mutex
	byTop map[string]*Producer
}

// producer returns the producer of topic, opening it on first use.
func (lp *letterProducers) producer(ctx context.Context, c *Client, topic string) (*Producer, error) {
	lp.mu.Lock()
	defer lp.mu.Unlock()
	if p := lp.byTop[topic]; p != nil {
		return p, nil
	}
	p, err := c.NewProducer(ctx, ProducerOptions{Topic: topic})
	if err != nil {
		return nil, err
	}
	if lp.byTop == nil {
		lp.byTop = map[string]*Producer{}
	}
	lp.byTop[topic] = p
	return p, nil
}

func (lp *letterProducers) close(ctx context.Context) {
	lp.mu.Lock()
	ps := lp.byTop
	lp.byTop = nil
	lp.mu.Unlock()
	for _, p := range ps {
		_ = p.Close(ctx)
	}
}

// produceAll writes msgs to topic and waits until every one is stored.
func (lp *letterProducers) produceAll(ctx context.Context, c *Client, topic string, msgs []*Message) error {
	p, err := lp.producer(ctx, c, topic)
	if err != nil {
		return err
	}
	errs := make(chan error, len(msgs))
	for _, m := range msgs {
		p.SendAsync(ctx, m, func(_ MessageID, _ *Message, err error) { errs <- err })
	}
	if err := p.Flush(ctx); err != nil {
		return err
	}
	var first error
	for range msgs {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// letterMessage copies m for a dead-letter or retry topic, with the
// properties naming where it came from.
func (co *Consumer) letterMessage(m *ReceivedMessage) *Message {
	props := make(map[string]string, len(m.Properties)+3)
	for k, v := range m.Properties {
		props[k] = v
	}
	if _, ok := props[PropertyRealTopic]; !ok {
		// A message already retried keeps its first topic and ID.
		props[PropertyRealTopic] = co.opts.Topic
		props[PropertyOriginMessageID] = m.ID.String()
	}
	props[PropertySubscription] = co.opts.Subscription
	return &Message{Key: m.Key, Payload: m.Payload, Properties: props, EventTime: m.EventTime}
}

// deadLetter writes the unacknowledged messages of delivery d to the
// dead-letter topic, then acknowledges its entry with dead_letter set.
// On a failure nothing is acknowledged: the entry is nacked and comes
// back (and is tried again).
func (co *Consumer) deadLetter(ctx context.Context, d *delivery) error {
	first := d.msgs[0].ID
	entry := MessageID{LedgerID: first.LedgerID, EntryID: first.EntryID}
	gen, stale := co.ackGen(entry)
	if stale {
		return nil
	}
	var out []*Message
	for _, m := range d.msgs[d.next:] {
		out = append(out, co.letterMessage(m))
	}
	topic := co.opts.DeadLetter.dlqTopic(co.opts)
	if err := co.letters.produceAll(ctx, co.c, topic, out); err != nil {
		co.log.Warn("dead-letter produce failed; the entry is redelivered", "topic", topic, "entry", entry, "err", err)
		_ = co.Nack(ctx, entry)
		return err
	}
	co.forgetEntry(entry)
	err := co.sendAck(ctx, gen, &clientv1.Ack{MessageIds: []*clientv1.MessageId{{LedgerId: entry.LedgerID, EntryId: entry.EntryID}}, DeadLetter: true})
	if err != nil && !errors.Is(err, ErrConsumerClosed) {
		co.log.Warn("dead-letter ack failed; the entry may be redelivered (and dead-lettered twice)", "entry", entry, "err", err)
	}
	co.c.metrics.deadLettered.Add(float64(len(out)))
	co.log.Debug("entry dead-lettered", "topic", topic, "entry", entry, "messages", len(out))
	return err
}

// deadLetterDue reports whether delivery d goes to the dead-letter topic.
func (co *Consumer) deadLetterDue(d *delivery) bool {
	p := co.opts.DeadLetter
	return p != nil && co.reader == nil && len(d.msgs) > 0 && d.msgs[0].RedeliveryCount >= p.MaxRedeliveries
}
