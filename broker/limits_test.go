package broker_test

import (
	"context"
	"strings"
	"testing"
	"time"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
	"github.com/meridianmq/meridian/broker"
	"github.com/meridianmq/meridian/internal/netguard/netguardtest"
	"github.com/meridianmq/meridian/metadata"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"gopkg.in/yaml.v3"
)

// TestServerLimits: the broker's HTTP listener refuses connection N+1
// from one IP (the gRPC one shares the code: netguard and the bookie and
// metadata tests), cuts a slow admin body and an idle keep-alive
// connection; its gRPC server announces the stream and header caps and
// refuses a message over max_message_bytes plus framing.
func TestServerLimits(t *testing.T) {
	const perIP = 8 // the region's own clients use the gRPC listener
	cli, _, rc := oneBroker(t, func(c *broker.Config) {
		c.MaxConnectionsPerIP = perIP
		c.MaxStreamsPerConnection = 11
		c.HTTPReadTimeout = 200 * time.Millisecond
		c.HTTPIdleTimeout = 200 * time.Millisecond
		c.MaxMessageBytes = 1024
	})
	b := rc.Broker(0)
	netguardtest.CheckSlowBodyCut(t, b.HTTPAddr(), "/admin/v1/CreateTenant")
	netguardtest.CheckIdleCut(t, b.HTTPAddr())
	netguardtest.CheckPerIPLimit(t, b.HTTPAddr(), perIP, netguardtest.HTTPProbe)
	set := netguardtest.GRPCSettings(t, b.Addr())
	if set[netguardtest.SettingMaxConcurrentStreams] != 11 || set[netguardtest.SettingMaxHeaderListSize] == 0 {
		t.Fatalf("broker SETTINGS %v: want max_concurrent_streams 11 and a max_header_list_size", set)
	}
	_, err := cli.Lookup(context.Background(), &clientv1.LookupRequest{Topic: strings.Repeat("x", 2<<20)})
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("2 MiB lookup to a broker with max_message_bytes 1024: %v, want ResourceExhausted", err)
	}
}

func TestConfigValidateLimits(t *testing.T) {
	cfg := broker.DefaultConfig()
	cfg.Region = "a"
	cfg.Global, cfg.Regional = struct{ metadata.Store }{}, struct{ metadata.Store }{}
	cfg.Ledgers = struct{ broker.LedgerStore }{}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	cfg.MaxConnectionsPerIP = -1
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "max_connections_per_ip") {
		t.Fatalf("Validate with max_connections_per_ip -1: %v, want an error naming it", err)
	}
}

// TestConfigLimitsYAML: the limits are top-level broker YAML fields.
func TestConfigLimitsYAML(t *testing.T) {
	cfg := broker.DefaultConfig()
	dec := yaml.NewDecoder(strings.NewReader("max_connections_per_ip: 5\nmax_streams_per_connection: 100\nhttp_read_timeout: 3s\n" +
		"max_batch_messages: 7\nmax_batch_bytes: 1048576\nmax_pending_delivery_bytes_per_consumer: 1000\n" +
		"max_pending_delivery_bytes_per_connection: 2000\nmax_pending_delivery_bytes: 3000\n"))
	dec.KnownFields(true)
	if err := dec.Decode(&cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.MaxConnectionsPerIP != 5 || cfg.MaxStreamsPerConnection != 100 || cfg.HTTPReadTimeout != 3*time.Second || cfg.HTTPIdleTimeout == 0 {
		t.Fatalf("decoded limits %+v", cfg.Limits)
	}
	if cfg.MaxBatchMessages != 7 || cfg.MaxBatchBytes != 1<<20 || cfg.MaxPendingDeliveryBytesPerConsumer != 1000 ||
		cfg.MaxPendingDeliveryBytesPerConnection != 2000 || cfg.MaxPendingDeliveryBytes != 3000 {
		t.Fatalf("decoded batch and delivery limits: %d %d %d %d %d", cfg.MaxBatchMessages, cfg.MaxBatchBytes,
			cfg.MaxPendingDeliveryBytesPerConsumer, cfg.MaxPendingDeliveryBytesPerConnection, cfg.MaxPendingDeliveryBytes)
	}
}

// TestBatchLimits: a send that declares more messages than
// max_batch_messages, or more uncompressed bytes than max_batch_bytes, is
// refused with an error naming the limit and its value, and nothing is
// stored; a batch within both limits is stored.
func TestBatchLimits(t *testing.T) {
	cli, _, _ := oneBroker(t, func(c *broker.Config) {
		c.MaxBatchMessages = 10
		c.MaxBatchBytes = 1 << 20
	})
	topic := "public/default/batch-limits"
	p, _ := openProducer(t, cli, topic, "p")
	for _, tc := range []struct {
		name string
		edit func(*clientv1.Send)
		want string
	}{
		{"11 messages", func(s *clientv1.Send) { s.NumMessages = 11 }, "limit 10 (max_batch_messages)"},
		{"2 MiB declared", func(s *clientv1.Send) { s.UncompressedSize = 2 << 20 }, "limit 1048576 (max_batch_bytes)"},
		{"2 MiB uncompressed", func(s *clientv1.Send) {
			s.Compression, s.UncompressedSize, s.Payload = clientv1.CompressionType_COMPRESSION_TYPE_NONE, 0, make([]byte, 2<<20)
		}, "limit 1048576 (max_batch_bytes)"},
	} {
		req := sendRequest(1, []byte("x"))
		tc.edit(req.GetSend())
		if err := p.st.Send(req); err != nil {
			t.Fatal(err)
		}
		r, err := p.st.Recv()
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if e := r.GetReceipt().GetError(); e == nil || !strings.Contains(e.GetMessage(), tc.want) {
			t.Fatalf("%s: receipt %v, want an error containing %q", tc.name, r.GetReceipt(), tc.want)
		}
	}
	if r := p.send(1, []byte("within")); r.GetError() != nil {
		t.Fatalf("a batch within the limits: %v", r.GetError())
	}
	c := subscribe(t, cli, topic, "s", clientv1.SubscriptionType_SUBSCRIPTION_TYPE_EXCLUSIVE)
	if _, got := c.next(); got != "within" {
		t.Fatalf("first stored message %q, want only the batch within the limits", got)
	}
}
