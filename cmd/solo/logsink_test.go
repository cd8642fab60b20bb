package main

import (
	"bytes"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

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

// log.time iso8601 stamps JSON lines in UTC with milliseconds; the default
// stays epoch seconds.
func TestNewLogger_TimeFormat(t *testing.T) {
	for _, c := range []struct{ time, want string }{
		{"", `"ts":1`},
		{config.LogTimeEpoch, `"ts":1`},
		{config.LogTimeISO8601, `"ts":"20`},
	} {
		var b bytes.Buffer
		log, err := newLogger(config.LogConfig{Level: "info", Time: c.time}, zapcore.AddSync(&b))
		if err != nil {
			t.Fatal(err)
		}
		log.Info("x")
		if !strings.HasPrefix(b.String(), `{"level":"info",`+c.want) ||
			c.time == config.LogTimeISO8601 && !regexp.MustCompile(`"ts":"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z"`).MatchString(b.String()) {
			t.Errorf("log.time %q: %s", c.time, b.String())
		}
	}
}
