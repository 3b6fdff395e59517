package main

import (
	"context"
	"fmt"
	"time"

	"github.com/meridianmq/meridian/client"
	"github.com/spf13/cobra"
)

type readFlags struct {
	url, from, output, name string
	count, queue            int
	idle, timeout           time.Duration
	verbose                 bool
}

func newReadCmd() *cobra.Command {
	f := &readFlags{}
	cmd := &cobra.Command{
		Use:   "read TOPIC [--from earliest|latest|TIME|ID|origin:R:L:E] [-n N] [--idle D] [--output text|json]",
		Short: "Read a topic from a position with a reader (no durable subscription)",
		Long: `Read messages of a topic from a start position and print them, like consume, with a
reader: the broker keeps its position in memory only, it holds no retention and nothing is
acknowledged on any subscription. After a reconnect the reader resumes where it was.

--from: earliest, latest (default: only new messages), a message ID L:E of this region,
origin:REGION:L:E (the message produced in REGION at L:E), an RFC 3339 time, a relative
time such as -10m, or @UNIX_MS. Times and origin positions are resolved per origin region,
so the same --from reads the same messages in every region.

Exits after -n messages (0 = until interrupted, or until --idle passes without a message:
exit 0 when at least one message arrived, else 1). --output json prints one line per message
as consume does.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return fmt.Errorf("read: want 1 argument TOPIC, got %d (usage: %s)", len(args), cmd.UseLine())
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error { return runRead(cmd, args[0], f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.url, "url", defaultURL, "broker gRPC address (host:port)")
	fl.StringVar(&f.from, "from", "latest", "start: earliest, latest, L:E, origin:REGION:L:E, RFC 3339 time, -DURATION or @UNIX_MS")
	fl.IntVarP(&f.count, "count", "n", 0, "exit after this many messages (0 = run until interrupted)")
	fl.StringVar(&f.output, "output", "text", "output format: text or json")
	fl.StringVar(&f.name, "reader-name", "", "the reader's subscription name (default: assigned by the broker)")
	fl.IntVar(&f.queue, "receiver-queue", 1000, "entries buffered in the client (flow-control window)")
	fl.DurationVar(&f.idle, "idle", 0, "exit when no message arrives for this long (0 = wait forever)")
	fl.DurationVar(&f.timeout, "connect-timeout", 10*time.Second, "connection timeout")
	fl.BoolVar(&f.verbose, "verbose", false, "debug logs on stderr")
	return cmd
}

func init() { rootCmd.AddCommand(newReadCmd()) }

func (f *readFlags) validate(topic string) (client.StartPosition, error) {
	if err := checkOutput(f.output); err != nil {
		return client.StartPosition{}, err
	}
	if err := client.ValidateTopicName(topic); err != nil {
		return client.StartPosition{}, fmt.Errorf("TOPIC: %w", err)
	}
	start, err := client.ParseStartPosition(f.from, time.Now())
	if err != nil {
		return client.StartPosition{}, fmt.Errorf("--from: %w", err)
	}
	if f.count < 0 {
		return client.StartPosition{}, fmt.Errorf("--count (-n) %d: must be >= 0", f.count)
	}
	if f.queue < 1 || f.queue > client.MaxReceiverQueueSize {
		return client.StartPosition{}, fmt.Errorf("--receiver-queue %d: must be in [1, %d]", f.queue, client.MaxReceiverQueueSize)
	}
	if f.idle < 0 {
		return client.StartPosition{}, fmt.Errorf("--idle %v: must be >= 0", f.idle)
	}
	return start, nil
}

func runRead(cmd *cobra.Command, topic string, f *readFlags) error {
	start, err := f.validate(topic)
	if err != nil {
		return err
	}
	ctx, stop := signalContext(cmd.Context())
	defer stop()
	c, err := connect(ctx, f.url, f.timeout, f.verbose)
	if err != nil {
		return err
	}
	defer closeQuietly(c)
	r, err := c.NewReader(ctx, client.ReaderOptions{Topic: topic, Start: start, Name: f.name, ReceiverQueueSize: f.queue})
	if err != nil {
		return fmt.Errorf("read %s from %s: %w", topic, start, err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = r.Close(cctx)
	}()
	return printMessages(ctx, cmd.OutOrStdout(), printSpec{output: f.output, count: f.count, idle: f.idle, verb: "read", op: "read"}, r.Next, nil)
}
