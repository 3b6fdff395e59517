package client

import (
	"context"
	"fmt"
	"strconv"
	"time"
)

// Retry-letter topic.
//
// With DeadLetterPolicy.EnableRetry the consumer also subscribes, with the
// same subscription name and type, to the retry topic
// ("<topic>-<subscription>-RETRY" by default) and Receive returns messages
// of both. ReconsumeLater(msg, delay) writes a copy of msg to the retry
// topic, held back by the broker for delay (Message.DeliverAfter), with
// RECONSUMETIMES raised, then acknowledges msg where it came from; past
// MaxRedeliveries reconsumes the copy goes to the dead-letter topic
// instead. A crash between the write and the ack leaves the message in one
// of the two topics, maybe both, never neither (the write is confirmed
// before the ack is sent).

// retryState is the consumer's retry-topic consumer.
type retryState struct {
	co *Consumer
	ch chan *ReceivedMessage
}

// startRetry subscribes to the retry topic (opts is the parent's) and
// forwards its messages to Receive.
func (co *Consumer) startRetry(ctx context.Context) error {
	p := co.opts.DeadLetter
	ro := co.opts
	ro.Topic = p.retryTopic(co.opts)
	ro.Start = nil
	ro.InitialPosition = Earliest // retries written before the first subscribe count
	ro.DeadLetter = &DeadLetterPolicy{MaxRedeliveries: p.MaxRedeliveries, Topic: p.dlqTopic(co.opts)}
	child, err := co.c.Subscribe(ctx, ro)
	if err != nil {
		return fmt.Errorf("subscribe to the retry topic %s: %w", ro.Topic, err)
	}
	co.retry = &retryState{co: child, ch: make(chan *ReceivedMessage)}
	go func() {
		for {
			m, err := child.Receive(co.ctx)
			if err != nil {
				return
			}
			co.mu.Lock()
			if co.retryLedgers == nil {
				co.retryLedgers = map[int64]bool{}
			}
			co.retryLedgers[m.ID.LedgerID] = true
			co.mu.Unlock()
			select {
			case co.retry.ch <- m:
			case <-co.ctx.Done():
				return
			}
		}
	}()
	return nil
}

// retryCh is the channel of retried messages (nil without retry).
func (co *Consumer) retryCh() chan *ReceivedMessage {
	if co.retry == nil {
		return nil
	}
	return co.retry.ch
}

// target returns the consumer that delivered id: the retry-topic consumer
// for a retried message, else co.
func (co *Consumer) target(id MessageID) *Consumer {
	if co.retry == nil {
		return co
	}
	co.mu.Lock()
	retried := co.retryLedgers[id.LedgerID]
	co.mu.Unlock()
	if retried {
		return co.retry.co
	}
	return co
}

// ReconsumeLater hands msg back to be received again after delay (0 with
// RetryDelays: the delay level of its reconsume count), through the retry
// topic; past DeadLetter.MaxRedeliveries reconsumes it goes to the
// dead-letter topic. It needs DeadLetter.EnableRetry. It returns once the
// copy is stored and msg acknowledged.
func (co *Consumer) ReconsumeLater(ctx context.Context, msg *ReceivedMessage, delay time.Duration) error {
	if co.part != nil {
		if msg == nil {
			return fmt.Errorf("%w: message is nil", ErrInvalidArgument)
		}
		return co.part.reconsumeLater(ctx, msg, delay)
	}
	if err := co.checkOpen(); err != nil {
		return err
	}
	p := co.opts.DeadLetter
	if p == nil || !p.EnableRetry || co.retry == nil {
		return fmt.Errorf("%w: ReconsumeLater needs DeadLetter.EnableRetry", ErrNotAllowed)
	}
	if delay < 0 || delay > MaxNackRedeliveryDelay {
		return fmt.Errorf("%w: ReconsumeLater delay %v out of range [0, %v]", ErrInvalidArgument, delay, MaxNackRedeliveryDelay)
	}
	times := 1
	if v, err := strconv.Atoi(msg.Properties[PropertyReconsumeTimes]); err == nil && v > 0 {
		times = v + 1
	}
	if delay == 0 && len(p.RetryDelays) > 0 {
		delay = p.RetryDelays[min(times-1, len(p.RetryDelays)-1)]
	}
	out := co.letterMessage(msg)
	topic := p.retryTopic(co.opts)
	if times > int(p.MaxRedeliveries) {
		topic = p.dlqTopic(co.opts)
		out.Properties[PropertyReconsumeTimes] = strconv.Itoa(times - 1)
	} else {
		out.Properties[PropertyReconsumeTimes] = strconv.Itoa(times)
		out.Properties[PropertyDelayTime] = strconv.FormatInt(delay.Milliseconds(), 10)
		out.DeliverAfter = delay
	}
	if err := co.letters.produceAll(ctx, co.c, topic, []*Message{out}); err != nil {
		return fmt.Errorf("reconsume %v through %s: %w", msg.ID, topic, err)
	}
	if topic == p.dlqTopic(co.opts) {
		co.c.metrics.deadLettered.Inc()
	}
	return co.Ack(ctx, msg.ID)
}
