package metadata

import (
	"context"
	"testing"
	"time"

	pb "github.com/lni/dragonboat/v4/raftpb"
	"github.com/meridianmq/meridian/security"
	"github.com/meridianmq/meridian/security/securitytest"
	dto "github.com/prometheus/client_model/go"
)

func loadTestTLS(t *testing.T, f security.TLSFiles) *security.TLS {
	t.Helper()
	tl, err := security.LoadTLS(f, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tl.Close() })
	return tl
}

func sendOne(ctx context.Context, tr *rewriteTransport, target string) error {
	conn, err := tr.GetConnection(ctx, target)
	if err != nil {
		return err
	}
	defer conn.Close()
	return conn.SendMessageBatch(pb.MessageBatch{SourceAddress: "src", Requests: []pb.Message{{Type: pb.Heartbeat, ShardID: 1, From: 1, To: 2}}})
}

// TestRaftTransportTLS: with TLS, batches flow between metadata nodes'
// certificates; a plaintext peer, a certificate of another CA and a
// certificate that is not a metadata node's are refused both ways, and
// nothing they send is delivered.
func TestRaftTransportTLS(t *testing.T) {
	ca := securitytest.NewCA(t, "ca")
	dst, rec := newTestTransportTLS(t, nil, loadTestTLS(t, ca.Files("metadata.a")))
	// The target name is what the certificate is checked against; the
	// rewrite map sends it to dst's real port.
	target := "localhost:7000"
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	src, _ := newTestTransportTLS(t, map[string]string{target: dst.addr()}, loadTestTLS(t, ca.Files("metadata.b")))
	if err := sendOne(ctx, src, target); err != nil {
		t.Fatal(err)
	}
	pollUntil(t, "the TLS batch", func() bool { n, _ := rec.counts(); return n == 1 })

	// A TLS node cannot dial a plaintext one.
	plain, plainRec := newTestTransport(t, nil)
	if err := sendOne(ctx, src, plain.addr()); err == nil {
		t.Fatal("TLS transport connected to a plaintext peer")
	}
	_ = plainRec

	inErrs := func() float64 {
		var m dto.Metric
		_ = dst.metrics.handshakes.WithLabelValues("inbound", "error").Write(&m)
		return m.GetCounter().GetValue()
	}
	refused := 0.0
	for _, tc := range []struct {
		name string
		tr   *rewriteTransport
	}{
		{"plaintext", func() *rewriteTransport {
			tr, _ := newTestTransport(t, map[string]string{target: dst.addr()})
			return tr
		}()},
		{"other CA", func() *rewriteTransport {
			tr, _ := newTestTransportTLS(t, map[string]string{target: dst.addr()}, loadTestTLS(t, securitytest.NewCA(t, "x").Files("metadata.a")))
			return tr
		}()},
		{"not a metadata node", func() *rewriteTransport {
			tr, _ := newTestTransportTLS(t, map[string]string{target: dst.addr()}, loadTestTLS(t, ca.Files("broker.a")))
			return tr
		}()},
	} {
		_ = sendOne(ctx, tc.tr, target) // may or may not report the refusal
		refused++
		pollUntil(t, tc.name+" refused by the server", func() bool { return inErrs() >= refused })
	}
	if n, _ := rec.counts(); n != 1 {
		t.Fatalf("%d batches delivered, want only the first", n)
	}
}
