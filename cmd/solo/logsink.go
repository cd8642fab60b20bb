package main

import (
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/solo-run/solo/cmd/solo/internal/config"
	"github.com/solo-run/solo/internal/msjson"
)

// logSink is a non-blocking zap sink: Write queues the line in a bounded
// buffer and returns at once; one goroutine drains the buffer to the real
// writer (stderr). When the buffer is full — a stalled log shipper,
// Docker's blocking log mode, Ctrl-S on a terminal — lines are dropped and
// counted (solo_log_lines_dropped_total); a line that fails to write (a
// closed pipe) counts as dropped too. When a write succeeds again the
// count dropped meanwhile is logged. So nothing on solo's path from the
// renew deadline to the stop of the program ever waits on a log write.
type logSink struct {
	w   io.Writer
	max int // bytes queued at most

	mu     sync.Mutex
	queue  [][]byte
	queued int // bytes queued or being written
	wake   chan struct{}

	dropped   atomic.Uint64 // since the last report
	total     prometheus.Counter
	log       atomic.Pointer[zap.Logger] // reports drops; set once built
	closed    chan struct{}
	closeOnce sync.Once
}

func newLogSink(w io.Writer, maxBytes int) *logSink {
	s := &logSink{
		w:    w,
		max:  maxBytes,
		wake: make(chan struct{}, 1),
		total: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "solo_log_lines_dropped_total",
			Help: "Log lines solo dropped because stderr was blocked (its buffer full) or failed.",
		}),
		closed: make(chan struct{}),
	}
	go s.drain()
	return s
}

// Write queues p; it never blocks on the underlying writer.
func (s *logSink) Write(p []byte) (int, error) {
	s.mu.Lock()
	if s.queued+len(p) > s.max {
		s.mu.Unlock()
		s.drop(1)
		return len(p), nil
	}
	s.queue = append(s.queue, append([]byte(nil), p...))
	s.queued += len(p)
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
	return len(p), nil
}

func (s *logSink) drop(n int) {
	s.dropped.Add(uint64(n))
	s.total.Add(float64(n))
}

func (s *logSink) drain() {
	for {
		select {
		case <-s.wake:
		case <-s.closed:
			return
		}
		for {
			s.mu.Lock()
			batch := s.queue
			s.queue = nil
			s.mu.Unlock()
			if len(batch) == 0 {
				break
			}
			for _, line := range batch {
				_, err := s.w.Write(line)
				s.mu.Lock()
				s.queued -= len(line)
				s.mu.Unlock()
				if err != nil {
					s.drop(1)
					continue
				}
				if n := s.dropped.Swap(0); n > 0 {
					if log := s.log.Load(); log != nil {
						log.Warn("log lines dropped: stderr was blocked or failing", zap.Uint64("dropped", n))
					}
				}
			}
		}
	}
}

// Sync waits up to config.LogSyncTimeout for the queue to drain (zap calls it at
// exit).
func (s *logSink) Sync() error {
	for deadline := time.Now().Add(config.LogSyncTimeout); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		s.mu.Lock()
		n := s.queued
		s.mu.Unlock()
		if n == 0 {
			break
		}
	}
	return nil
}

// Close stops the draining goroutine (what is queued is lost).
func (s *logSink) Close() { s.closeOnce.Do(func() { close(s.closed) }) }

// newLogger returns JSON logs in production, console logs with dev. JSON
// lines stamp "ts" as cfg.Time says: epoch seconds, or ISO 8601 in UTC
// with milliseconds. w must be safe for concurrent use (solo run passes a
// logSink).
func newLogger(cfg config.LogConfig, w zapcore.WriteSyncer) (*zap.Logger, error) {
	level, err := zapcore.ParseLevel(cfg.Level)
	if err != nil {
		return nil, usageErr("log.level %q: %w", cfg.Level, err)
	}
	var enc zapcore.Encoder
	if cfg.Dev {
		ec := zap.NewDevelopmentEncoderConfig()
		ec.EncodeTime = zapcore.TimeEncoderOfLayout("15:04:05.000")
		enc = zapcore.NewConsoleEncoder(ec)
	} else {
		ec := zap.NewProductionEncoderConfig()
		if cfg.Time == config.LogTimeISO8601 {
			ec.EncodeTime = func(t time.Time, e zapcore.PrimitiveArrayEncoder) {
				e.AppendString(t.UTC().Format(msjson.Layout))
			}
		}
		enc = zapcore.NewJSONEncoder(ec)
	}
	return zap.New(zapcore.NewCore(enc, w, level)), nil
}
