package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"runtime"
	"syscall"
	"time"

	"github.com/meridianmq/meridian/internal/netguard"
	"github.com/meridianmq/meridian/region"
	"github.com/meridianmq/meridian/security"
	"github.com/spf13/cobra"
)

func init() {
	var dataDir, grpcAddr, httpAddr, regionName, logLevel, pprofAddr string
	var secure bool
	cmd := &cobra.Command{
		Use:   "standalone",
		Short: "Run a whole region (metadata, one bookie, one broker) in one process",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var lvl slog.Level
			if err := lvl.UnmarshalText([]byte(logLevel)); err != nil {
				return fmt.Errorf("--log-level %q: want debug, info, warn or error", logLevel)
			}
			log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}))
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			sa, err := region.StartStandalone(ctx, region.StandaloneConfig{DataDir: dataDir, GRPCAddr: grpcAddr, HTTPAddr: httpAddr, Region: regionName, Logger: log, Secure: secure})
			cancel()
			if err != nil {
				return err
			}
			if pprofAddr != "" {
				_, stop, err := servePprof(pprofAddr, log)
				if err != nil {
					_ = sa.Close()
					return err
				}
				defer stop()
			}
			fmt.Printf("meridian standalone ready: grpc %s, http %s (metrics /metrics, admin /admin/v1/), data %s\n", sa.GRPCAddr(), sa.HTTPAddr(), dataDir)
			if secure {
				printSecureUsage(os.Stdout, sa.GRPCAddr(), sa.HTTPAddr(), sa.SecurityFiles())
			}
			sig := make(chan os.Signal, 1)
			signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
			<-sig
			fmt.Println("meridian standalone stopping")
			return sa.Close()
		},
	}
	cmd.Flags().StringVar(&dataDir, "data-dir", "./data", "directory for metadata, journal and ledgers")
	cmd.Flags().StringVar(&grpcAddr, "grpc", "127.0.0.1:6650", "gRPC address (client and admin protocol)")
	cmd.Flags().StringVar(&httpAddr, "http", "127.0.0.1:8080", "HTTP address (/metrics, /healthz, /readyz, admin JSON)")
	cmd.Flags().StringVar(&regionName, "region", "standalone", "region name")
	cmd.Flags().StringVar(&logLevel, "log-level", "warn", "log level: debug, info, warn, error")
	cmd.Flags().BoolVar(&secure, "secure", false, "TLS and token authentication, with a CA, certificates, a token key and an admin token generated in DATA/security (kept across restarts)")
	cmd.Flags().StringVar(&pprofAddr, "pprof", "", "address for net/http/pprof (/debug/pprof/, with mutex and block profiling on); empty: off")
	rootCmd.AddCommand(cmd)
}

// printSecureUsage tells a user of a --secure standalone how to reach it.
func printSecureUsage(w io.Writer, grpcAddr, httpAddr string, p security.Provisioned) {
	ca, tok := absIf(p.CA), absIf(p.AdminToken)
	fmt.Fprintf(w, `security on: TLS with the CA %[1]s, token authentication; admin token (role %[3]s, superuser) in %[2]s
  save it as your client context once:
    meridian context save standalone --url %[4]s --tls-ca %[1]s --token-file %[2]s
  or pass the flags:
    meridian admin --url %[4]s --tls-ca %[1]s --token-file %[2]s tenants list
  HTTP admin: curl --cacert %[1]s -H "Authorization: Bearer $(cat %[2]s)" https://%[5]s/admin/v1/ListTenants -d '{}'
  more tokens: meridian tokens create --secret-key %[6]s --subject ROLE
`, ca, tok, security.AdminRole, grpcAddr, httpAddr, absIf(p.SecretKey))
}

// servePprof serves net/http/pprof on its own listener (never on the
// public HTTP port) and turns on mutex and block profiling. It returns
// the address it listens on and a func that stops it.
func servePprof(addr string, log *slog.Logger) (string, func(), error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", nil, fmt.Errorf("--pprof %q: %w", addr, err)
	}
	runtime.SetMutexProfileFraction(100)
	runtime.SetBlockProfileRate(100_000) // one sample per 100 µs blocked
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := netguard.DefaultHTTPServer(mux, nil)
	// /debug/pprof/profile and /trace stream for ?seconds=N, and pprof
	// refuses N beyond a WriteTimeout: this listener is an operator's,
	// never the public port, so only reads and idle connections are cut.
	srv.WriteTimeout = 0
	go func() {
		if err := srv.Serve(ln); err != nil && err != http.ErrServerClosed {
			log.Warn("pprof server stopped", "err", err)
		}
	}()
	log.Info("pprof serving", "addr", ln.Addr().String())
	return ln.Addr().String(), func() { _ = srv.Close() }, nil
}
