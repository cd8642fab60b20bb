package worker_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/solo-run/solo/leader"
	"github.com/solo-run/solo/leader/leadertest"
	"github.com/solo-run/solo/worker"
)

// One logger, given to the worker only, carries the elector's lines
// too; an elector with a logger of its own keeps it.
// Mutation: without the UseLogger call in worker.New this fails with
// "elector lines through the worker's logger: 0, want the elected line of
// a-01725607074c only".
func TestWorker_ElectorLogsThroughWorkerLogger(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		core, logs := observer.New(zapcore.InfoLevel)
		ownCore, own := observer.New(zapcore.InfoLevel)
		lock := leadertest.New()
		plain, err := leader.NewWithStore(lock, cfg("a"))
		if err != nil {
			t.Fatal(err)
		}
		mine, err := leader.NewWithStore(lock, cfg("b"), leader.WithLogger(zap.New(ownCore)))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 2)
		for _, e := range []*leader.Elector{plain, mine} {
			w, err := worker.New(e, worker.WithLogger(zap.New(core)))
			if err != nil {
				t.Fatal(err)
			}
			go func() { done <- w.Run(ctx) }()
			time.Sleep(10 * time.Second)
			cancel() // a leads first; then b, with a's lease released
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			ctx, cancel = context.WithCancel(context.Background())
		}
		cancel()
		elected := logs.FilterLoggerName("leader").FilterMessage("elected")
		if elected.Len() != 1 || elected.All()[0].ContextMap()["id"] != plain.ID() {
			t.Fatalf("elector lines through the worker's logger: %d, want the elected line of %s only", elected.Len(), plain.ID())
		}
		if own.FilterLoggerName("leader").FilterMessage("elected").Len() != 1 {
			t.Fatalf("the elector with its own logger logged elsewhere: %v", own.All())
		}
		if logs.FilterLoggerName("worker").Len() == 0 {
			t.Fatal("no worker lines")
		}
	})
}
