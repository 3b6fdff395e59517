package main

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// TestDialRewrite: a gRPC connection to a mapped address reaches the
// address it maps to; bad maps in bookie and broker configs are refused
// naming the field.
func TestDialRewrite(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	// Nothing listens on the target (a port just freed).
	l2, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	target := l2.Addr().String()
	l2.Close()
	opts := append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, rewriteDialer(map[string]string{target: lis.Addr().String()})...)
	cc, err := grpc.NewClient(target, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true)); err != nil {
		t.Fatalf("health check through the rewrite: %v", err)
	}
	if rewriteDialer(nil) != nil {
		t.Fatal("an empty map adds a dialer")
	}

	if _, err := loadBrokerConfig([]byte("broker:\n  region: r\n  dial_rewrite: {\"a:1\": nope}\nmetadata:\n  endpoints: [a:1]\n")); err == nil || !strings.Contains(err.Error(), `broker.dial_rewrite["a:1"] = "nope" must be host:port`) {
		t.Fatalf("broker dial_rewrite with a bad value: %v", err)
	}
	if _, _, _, err := loadBookieConfig([]byte("id: b\njournal_dir: /tmp/x\ndial_rewrite: {nope: \"a:1\"}\n")); err == nil || !strings.Contains(err.Error(), `dial_rewrite key "nope" must be host:port`) {
		t.Fatalf("bookie dial_rewrite with a bad key: %v", err)
	}
	_, fc, plan, err := loadBookieConfig([]byte("id: b\njournal_dir: /tmp/x\nmetadata:\n  endpoints: [a:1]\ndial_rewrite: {\"a:1\": \"b:2\"}\n"))
	if err != nil || fc.DialRewrite["a:1"] != "b:2" || len(plan.worker.DialOptions) != 1 || len(plan.auditor.DialOptions) != 1 {
		t.Fatalf("bookie dial_rewrite: %v %v, worker %d auditor %d dial options", fc.DialRewrite, err, len(plan.worker.DialOptions), len(plan.auditor.DialOptions))
	}
}
