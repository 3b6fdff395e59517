package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"

	"github.com/meridianmq/meridian/client"
)

// perfTopicsFlags are the flags of "perf topics".
type perfTopicsFlags struct {
	url         string
	namespace   string
	prefix      string
	count       int
	concurrency int
	pid         int
	loadOnly    bool
	timeout     time.Duration
}

func newPerfTopicsCmd() *cobra.Command {
	f := &perfTopicsFlags{}
	cmd := &cobra.Command{
		Use:   "topics",
		Short: "Create (or load) many idle topics, each with one subscription, and report time and broker memory",
		Long: `Create --count topics <namespace>/<prefix>-<i>, each with one subscription
"s", with --concurrency admin calls in flight; report the time taken and, with
--pid, the broker's resident memory (VmRSS from /proc/<pid>/status) before and
after, and the memory per topic. With --load-only the topics must exist: each
is loaded by asking for its stats (use it after a restart to time loading).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if f.count < 1 || f.count > 10_000_000 {
				return fmt.Errorf("--count %d: want 1..10000000", f.count)
			}
			if f.concurrency < 1 || f.concurrency > 4096 {
				return fmt.Errorf("--concurrency %d: want 1..4096", f.concurrency)
			}
			ctx, stop := signalContext(cmd.Context())
			defer stop()
			return perfTopics(ctx, cmd, f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.url, "url", defaultURL, "broker gRPC address (host:port)")
	fl.StringVar(&f.namespace, "namespace", "public/default", "namespace of the topics")
	fl.StringVar(&f.prefix, "prefix", "idle", "topic name prefix")
	fl.IntVar(&f.count, "count", 10000, "number of topics")
	fl.IntVar(&f.concurrency, "concurrency", 64, "admin calls in flight")
	fl.IntVar(&f.pid, "pid", 0, "broker process id, to report its resident memory (0 = don't)")
	fl.BoolVar(&f.loadOnly, "load-only", false, "don't create: load existing topics by asking for their stats")
	fl.DurationVar(&f.timeout, "connect-timeout", 10*time.Second, "connection timeout")
	return cmd
}

func init() {
	for _, c := range rootCmd.Commands() {
		if c.Name() == "perf" {
			c.AddCommand(newPerfTopicsCmd())
			return
		}
	}
}

// processRSS reads VmRSS of pid in bytes.
func processRSS(pid int) (int64, error) {
	fh, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, err
	}
	defer fh.Close()
	sc := bufio.NewScanner(fh)
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("VmRSS %q: %w", rest, err)
			}
			return kb * 1024, nil
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, errors.New("no VmRSS in /proc/" + strconv.Itoa(pid) + "/status")
}

func perfTopics(ctx context.Context, cmd *cobra.Command, f *perfTopicsFlags) error {
	out := cmd.OutOrStdout()
	c, err := connect(ctx, f.url, f.timeout, false)
	if err != nil {
		return err
	}
	defer closeQuietly(c)
	adm, err := c.Admin()
	if err != nil {
		return err
	}
	var before int64
	if f.pid > 0 {
		if before, err = processRSS(f.pid); err != nil {
			return fmt.Errorf("--pid %d: %w", f.pid, err)
		}
	}
	var next, done, failed atomic.Int64
	var firstErr atomic.Value
	start := time.Now()
	var wg sync.WaitGroup
	for range f.concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				i := next.Add(1) - 1
				if i >= int64(f.count) {
					return
				}
				topic := fmt.Sprintf("%s/%s-%d", f.namespace, f.prefix, i)
				var err error
				if f.loadOnly {
					_, err = adm.TopicStats(ctx, topic)
				} else if err = adm.CreateTopic(ctx, topic); err == nil {
					err = adm.CreateSubscription(ctx, topic, "s", client.Earliest)
				}
				if err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err)
					continue
				}
				if n := done.Add(1); n%10000 == 0 {
					fmt.Fprintf(out, "%d topics in %s\n", n, time.Since(start).Round(time.Millisecond))
				}
			}
		}()
	}
	wg.Wait()
	el := time.Since(start)
	verb := "created"
	if f.loadOnly {
		verb = "loaded"
	}
	fmt.Fprintf(out, "%s %d topics (%d failed) in %s: %.0f topics/s\n", verb, done.Load(), failed.Load(), el.Round(time.Millisecond), float64(done.Load())/el.Seconds())
	if e := firstErr.Load(); e != nil {
		fmt.Fprintf(out, "first error: %v\n", e)
	}
	if f.pid > 0 {
		after, err := processRSS(f.pid)
		if err != nil {
			return fmt.Errorf("--pid %d: %w", f.pid, err)
		}
		fmt.Fprintf(out, "broker RSS before %.1f MiB, after %.1f MiB: %.0f bytes per topic\n",
			float64(before)/(1<<20), float64(after)/(1<<20), float64(after-before)/float64(max(done.Load(), 1)))
	}
	if failed.Load() > 0 {
		return fmt.Errorf("%d of %d topics failed", failed.Load(), f.count)
	}
	return ctx.Err()
}
