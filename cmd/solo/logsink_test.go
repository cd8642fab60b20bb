package main

import (
	"bytes"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"

	"github.com/solo-run/solo/cmd/solo/internal/config"
)

// gate is a writer that blocks while closed, like a stderr pipe nobody reads.
type gate struct {
	open chan struct{}
	mu   sync.Mutex
	buf  bytes.Buffer
}

func (g *gate) Write(p []byte) (int, error) {
	<-g.open
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.buf.Write(p)
}

func (g *gate) String() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.buf.String()
}

// TestLogSink: with its writer blocked, logging returns at once; lines over
// the buffer are dropped and counted; once the writer flows the count is
// logged.
func TestLogSink(t *testing.T) {
	g := &gate{open: make(chan struct{})}
	sink := newLogSink(g, 1000)
	defer sink.Close()
	log, err := newLogger(config.DefaultConfig().Log, sink)
	if err != nil {
		t.Fatal(err)
	}
	sink.log.Store(log)
	start := time.Now()
	for i := 0; i < 100; i++ {
		log.Info("renew failed; retrying", zap.Int("i", i))
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("100 log lines took %s with the writer blocked", d)
	}
	dropped := testutil.ToFloat64(sink.total)
	if dropped < 50 {
		t.Fatalf("solo_log_lines_dropped_total = %v, want most of 100 lines (buffer 1000 bytes)", dropped)
	}
	close(g.open)
	log.Info("after")
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(g.String(), "log lines dropped") {
		if time.Now().After(deadline) {
			t.Fatalf("no drop report:\n%s", g.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	_ = log.Sync()
	if !strings.Contains(g.String(), `"after"`) {
		t.Fatalf("line after recovery missing:\n%s", g.String())
	}
}
