package leader

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/solo-run/solo/internal/hooks"
)

// pipeRecorder answers every command without a network (renew.lua's
// "renewed") and records each pipeline's lease keys.
type pipeRecorder struct {
	mu    sync.Mutex
	pipes [][]string
}

func (r *pipeRecorder) DialHook(redis.DialHook) redis.DialHook {
	return func(context.Context, string, string) (net.Conn, error) {
		return nil, errors.New("no network here")
	}
}

func (r *pipeRecorder) ProcessHook(redis.ProcessHook) redis.ProcessHook {
	return func(_ context.Context, cmd redis.Cmder) error {
		cmd.(*redis.Cmd).SetVal(int64(1))
		return nil
	}
}

func (r *pipeRecorder) ProcessPipelineHook(redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(_ context.Context, cmds []redis.Cmder) error {
		var keys []string
		for _, c := range cmds {
			keys = append(keys, fmt.Sprint(c.Args()[3])) // EVALSHA sha 2 KEY …
			c.(*redis.Cmd).SetVal(int64(1))
		}
		r.mu.Lock()
		r.pipes = append(r.pipes, keys)
		r.mu.Unlock()
		return nil
	}
}

// TestHub_SettleBatchesAnInstantByKey: given the simulator's settle
// function (WithHooks), the Hub's batcher settles before it
// takes its queue and orders it by key, so renewals sent at one fake
// instant share one pipeline in key order whatever order their
// goroutines ran in; without it, it takes them as they came.
//
// Mutation check: without the settle call, "pipelines [[k7] [k6] [k5] [k4]
// [k3] [k2] [k1] [k0]], want one, in key order"; without the sort,
// "pipelines [[k7 k6 k5 k4 k3 k2 k1 k0]], want one, in key order".
func TestHub_SettleBatchesAnInstantByKey(t *testing.T) {
	keys := []string{"k7", "k6", "k5", "k4", "k3", "k2", "k1", "k0"}
	run := func(t *testing.T, settle bool) [][]string {
		var pipes [][]string
		synctest.Test(t, func(t *testing.T) {
			rec := &pipeRecorder{}
			client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", Protocol: 2, DisableIdentity: true,
				MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}})
			client.AddHook(rec)
			defer client.Close()
			var hk hooks.Hooks
			if settle {
				hk.Settle = func(string) { time.Sleep(time.Nanosecond) }
			}
			h := NewHub(client, WithHooks(hk))
			defer h.Close()
			var wg sync.WaitGroup
			for _, k := range keys {
				wg.Go(func() {
					if _, err := h.renew(context.Background(), k, "1 me", 1000); err != nil {
						t.Errorf("renew %s: %v", k, err)
					}
				})
				// Each renewal queued before the next starts: the
				// batcher, woken by the first, could take it alone.
				synctest.Wait()
			}
			wg.Wait()
			rec.mu.Lock()
			pipes = rec.pipes
			rec.mu.Unlock()
		})
		return pipes
	}
	sorted := slices.Sorted(slices.Values(keys))
	for range 5 {
		if pipes := run(t, true); len(pipes) != 1 || !slices.Equal(pipes[0], sorted) {
			t.Fatalf("pipelines %v, want one, in key order", pipes)
		}
	}
	// The production path is unchanged: no settle, arrival order.
	if pipes := run(t, false); len(pipes) == 0 || slices.Equal(slices.Concat(pipes...), sorted) {
		t.Fatalf("pipelines %v without a settle function, want the arrival order %v", pipes, keys)
	}
}
