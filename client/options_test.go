package client

import (
	"errors"
	"strings"
	"testing"
)

func TestProducerOptionsValidate(t *testing.T) {
	ok := ProducerOptions{Topic: "public/default/t"}.withDefaults()
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		mut  func(*ProducerOptions)
		want string
	}{
		{func(o *ProducerOptions) { o.Topic = "" }, "topic is required"},
		{func(o *ProducerOptions) { o.Topic = "a/b" }, "tenant/namespace/topic"},
		{func(o *ProducerOptions) { o.Topic = "a//c" }, "empty part"},
		{func(o *ProducerOptions) { o.BatchingMaxMessages = MaxBatchingMaxMessages + 1 }, "BatchingMaxMessages"},
		{func(o *ProducerOptions) { o.BatchingMaxBytes = -1 }, "BatchingMaxBytes"},
		{func(o *ProducerOptions) { o.MaxPendingMessages = -5 }, "MaxPendingMessages"},
		{func(o *ProducerOptions) { o.Compression = 7 }, "Compression"},
	}
	for _, c := range cases {
		o := ok
		c.mut(&o)
		err := o.Validate()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("want error mentioning %q, got %v", c.want, err)
		}
		if !errors.Is(err, ErrInvalidArgument) && !errors.Is(err, ErrInvalidName) {
			t.Errorf("%v: not a client sentinel", err)
		}
	}
}

func TestConsumerOptionsValidate(t *testing.T) {
	ok := ConsumerOptions{Topic: "public/default/t", Subscription: "s"}.withDefaults()
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, mut := range []func(*ConsumerOptions){
		func(o *ConsumerOptions) { o.Subscription = "" },
		func(o *ConsumerOptions) { o.Type = 9 },
		func(o *ConsumerOptions) { o.InitialPosition = 3 },
		func(o *ConsumerOptions) { o.ReceiverQueueSize = MaxReceiverQueueSize + 1 },
	} {
		o := ok
		mut(&o)
		if err := o.Validate(); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("want ErrInvalidArgument, got %v", err)
		}
	}
}

func TestParsers(t *testing.T) {
	if c, err := ParseCompression("zstd"); err != nil || c != CompressionZstd {
		t.Fatal(c, err)
	}
	if _, err := ParseCompression("lz4"); !errors.Is(err, ErrInvalidArgument) {
		t.Fatal(err)
	}
	if ty, err := ParseSubscriptionType("failover"); err != nil || ty != Failover {
		t.Fatal(ty, err)
	}
	if ty, err := ParseSubscriptionType("key_shared"); err != nil || ty != KeyShared {
		t.Fatal(ty, err)
	}
	if _, err := ParseSubscriptionType("keyed"); err == nil {
		t.Fatal("keyed accepted")
	}
	if p, err := ParseInitialPosition("earliest"); err != nil || p != Earliest {
		t.Fatal(p, err)
	}
	id, err := ParseMessageID("12:34:5")
	if err != nil || id != (MessageID{12, 34, 5}) || id.String() != "12:34:5" {
		t.Fatal(id, err)
	}
	for _, bad := range []string{"", "1", "a:b:c", "-1:2:3", "1:2:3:4"} {
		if _, err := ParseMessageID(bad); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("%q: %v", bad, err)
		}
	}
	if (MessageID{1, 2, 3}).Compare(MessageID{1, 3, 0}) != -1 || (MessageID{2, 0, 0}).Compare(MessageID{1, 9, 9}) != 1 {
		t.Fatal("Compare")
	}
	if rp, err := ParseResetPosition("3:4:0"); err != nil || rp.MessageID == nil || *rp.MessageID != (MessageID{3, 4, 0}) {
		t.Fatal(rp, err)
	}
	if rp, err := ParseResetPosition("@1700000000000"); err != nil || rp.PublishTimeMs != 1700000000000 {
		t.Fatal(rp, err)
	}
}

func TestPreferForLookupMovesToFront(t *testing.T) {
	c := &Client{regions: []*regionState{{known: []string{"a", "b", "c"}}}}
	c.preferForLookup(0, "c")
	if got := c.regions[0].known; got[0] != "c" || got[1] != "a" || got[2] != "b" {
		t.Fatalf("known = %v", got)
	}
	c.preferForLookup(0, "c")
	c.learn(0, "d")
	c.preferForLookup(0, "zz") // unknown: no change
	if got := c.regions[0].known; len(got) != 4 || got[0] != "c" || got[3] != "d" {
		t.Fatalf("known = %v", got)
	}
}
