package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/solo-run/solo/leader/redisurl"
)

// produce adds n messages, with field n = 1..N, to the stream, at -rate
// messages per second (0: as fast as Redis takes them).
func produce(ctx context.Context, args []string, stdout io.Writer) error {
	var c common
	var n, rate int
	fs := flag.NewFlagSet("produce", flag.ContinueOnError)
	c.register(fs)
	fs.IntVar(&n, "n", 10000, "number of messages")
	fs.IntVar(&rate, "rate", 0, "messages per second; 0: as fast as possible")
	if err := fs.Parse(args); err != nil {
		return err
	}
	client, err := redisurl.NewClient(c.redisURL)
	if err != nil {
		return err
	}
	defer client.Close()

	// Send in pipelined chunks of up to 100, spaced to keep the rate.
	chunk := 100
	if rate > 0 {
		chunk = max(1, min(100, rate/100))
	}
	start := time.Now()
	for sent := 0; sent < n; {
		pipe := client.Pipeline()
		for k := 0; k < chunk && sent < n; k++ {
			sent++
			pipe.XAdd(ctx, &redis.XAddArgs{Stream: c.stream, Values: map[string]any{"n": sent}})
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return fmt.Errorf("after %d messages: %w", sent, err)
		}
		if rate > 0 {
			due := start.Add(time.Duration(sent) * time.Second / time.Duration(rate))
			t := time.NewTimer(time.Until(due))
			select {
			case <-ctx.Done():
				t.Stop()
				return fmt.Errorf("interrupted after %d messages", sent)
			case <-t.C:
			}
		}
	}
	fmt.Fprintf(stdout, "produced %d messages to %s in %v\n", n, c.stream, time.Since(start).Round(time.Millisecond))
	return nil
}
