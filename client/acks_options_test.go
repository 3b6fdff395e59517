package client

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestAckOptionsValidation: every bad nack, ack-timeout and dead-letter
// option is refused naming the field; defaults are Pulsar's.
func TestAckOptionsValidation(t *testing.T) {
	base := ConsumerOptions{Topic: "t/ns/x", Subscription: "s"}
	if d := base.withDefaults(); d.NackRedeliveryDelay != time.Minute || d.AckTimeout != 0 || d.Validate() != nil {
		t.Fatalf("defaults: nack delay %v, ack timeout %v, %v", d.NackRedeliveryDelay, d.AckTimeout, d.Validate())
	}
	for field, edit := range map[string]func(*ConsumerOptions){
		"NackRedeliveryDelay": func(o *ConsumerOptions) { o.NackRedeliveryDelay = 25 * time.Hour },
		"NackBackoff.Min":     func(o *ConsumerOptions) { o.NackBackoff = &NackBackoff{Min: time.Second, Max: time.Millisecond} },
		"NackBackoff.Max":     func(o *ConsumerOptions) { o.NackBackoff = &NackBackoff{Min: time.Second, Max: 48 * time.Hour} },
		"NackBackoff.Multiplier": func(o *ConsumerOptions) {
			o.NackBackoff = &NackBackoff{Min: time.Second, Max: time.Minute, Multiplier: 0.5}
		},
		"AckTimeout":                 func(o *ConsumerOptions) { o.AckTimeout = 500 * time.Millisecond },
		"DeadLetter.MaxRedeliveries": func(o *ConsumerOptions) { o.DeadLetter = &DeadLetterPolicy{} },
		"DeadLetter.Topic":           func(o *ConsumerOptions) { o.DeadLetter = &DeadLetterPolicy{MaxRedeliveries: 1, Topic: "t/ns/x"} },
		"DeadLetter.RetryTopic":      func(o *ConsumerOptions) { o.DeadLetter = &DeadLetterPolicy{MaxRedeliveries: 1, RetryTopic: "bad"} },
		"DeadLetter.RetryDelays[1]": func(o *ConsumerOptions) {
			o.DeadLetter = &DeadLetterPolicy{MaxRedeliveries: 1, RetryDelays: []time.Duration{0, -1}}
		},
		"DeadLetter needs a durable": func(o *ConsumerOptions) { o.nonDurable = true; o.DeadLetter = &DeadLetterPolicy{MaxRedeliveries: 1} },
	} {
		o := base
		edit(&o)
		err := o.withDefaults().Validate()
		if err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("%s: %v, want an error naming it", field, err)
		} else if !errors.Is(err, ErrInvalidArgument) && !errors.Is(err, ErrInvalidName) {
			t.Errorf("%s: %v is not ErrInvalidArgument", field, err)
		}
	}
	bo := NackBackoff{Min: 100 * time.Millisecond, Max: time.Second}
	if bo.Delay(0) != 100*time.Millisecond || bo.Delay(2) != 400*time.Millisecond || bo.Delay(10) != time.Second || bo.Delay(1<<30) != time.Second {
		t.Fatalf("default multiplier 2: %v %v %v", bo.Delay(0), bo.Delay(2), bo.Delay(10))
	}
}
