package leader_test

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
)

// An elector stopped just as its acquire is answered (the lease was free:
// the leader had resigned) hands the lease back on its way out, and says
// so as what it is: a lease won, or an acquire abandoned, as it stopped.
// "released a lease taken by an acquire whose reply never came" is kept
// for a reply lost on the way. Old code: that line, at every such stop,
// in every one of the runs.
func TestElector_StopAsAcquireAnsweredLogsNoLostReply(t *testing.T) {
	for i := range 10 {
		synctest.Test(t, func(t *testing.T) {
			lock := leadertest.New()
			core, logs := observer.New(zapcore.InfoLevel)
			e := newElector(t, lock, fastConfig("a"), leader.WithLogger(zap.New(core)))
			ctx, cancel := context.WithCancel(context.Background())
			lock.SetAfter(func(_ context.Context, op leadertest.Op) error {
				if op == leadertest.OpAcquire {
					cancel() // SIGTERM as the acquire is carried out
				}
				return nil
			})
			lock.SetBefore(func(ctx context.Context, op leadertest.Op) error {
				if op == leadertest.OpRelease {
					// A round trip: a release sent on a context already
					// ended is abandoned, as a real client's is.
					select {
					case <-ctx.Done():
						return ctx.Err()
					case <-time.After(10 * time.Millisecond):
					}
				}
				return nil
			})
			if err := e.Run(ctx, func(ctx context.Context) error { <-ctx.Done(); return nil }); err != nil {
				t.Fatal(err)
			}
			if n := logs.FilterMessageSnippet("reply never came").Len(); n != 0 {
				t.Fatalf("run %d: an ordinary stop logged %q", i, logs.FilterMessageSnippet("reply never came").All()[0].Message)
			}
			if n := logs.FilterMessageSnippet("as the elector stopped").Len(); n != 1 {
				t.Fatalf("run %d: logged %d hand-backs at the stop, want 1: %v", i, n, logs.All())
			}
			if l, _, held := lock.Holder(); held {
				t.Fatalf("run %d: the lease is left to %s, want released", i, l)
			}
		})
	}
}
