package lock_test

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/solo-run/solo/leader/lock"
)

// regrantHook plays a fair waiter's network: the first acquire that
// adopts a grant (code 2) is answered after late, and the first fair
// release after it is held back until open (a request delayed on the
// network), then sent; its reply goes to released. held counts the
// acquire replies "held" (code 0).
type regrantHook struct {
	late     time.Duration
	release  string // fair_release.lua's SHA1
	gate     chan struct{}
	once     sync.Once
	released chan any

	mu      sync.Mutex
	held    int
	adopted bool // the late adoption was answered
	delayed bool // the release was held back
}

func newRegrantHook(late time.Duration) *regrantHook {
	sum := sha1.Sum([]byte(lock.FairReleaseLua))
	return &regrantHook{late: late, release: hex.EncodeToString(sum[:]), gate: make(chan struct{}), released: make(chan any, 1)}
}

func (h *regrantHook) open() { h.once.Do(func() { close(h.gate) }) }

func (h *regrantHook) heldReplies() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.held
}

// holdBack reports whether cmd is the release to hold back.
func (h *regrantHook) holdBack(cmd redis.Cmder) bool {
	a := cmd.Args()
	if !isScript(cmd) || len(a) < 2 {
		return false
	}
	if s, _ := a[1].(string); s != h.release && s != lock.FairReleaseLua {
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.adopted || h.delayed {
		return false
	}
	h.delayed = true
	return true
}

// answered records cmd's reply and reports whether it is the adoption to
// answer late.
func (h *regrantHook) answered(cmd redis.Cmder) bool {
	c, ok := cmd.(*redis.Cmd)
	if !ok || !isScript(cmd) {
		return false
	}
	res, err := c.Slice()
	if err != nil || len(res) == 0 {
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	switch res[0] {
	case int64(0):
		h.held++
	case int64(2):
		if !h.adopted {
			h.adopted = true
			return true
		}
	}
	return false
}

func (h *regrantHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *regrantHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.holdBack(cmd) {
			<-h.gate
			err := next(context.WithoutCancel(ctx), cmd)
			h.released <- cmd.(*redis.Cmd).Val()
			return err
		}
		err := next(ctx, cmd)
		if h.answered(cmd) {
			time.Sleep(h.late)
		}
		return err
	}
}

func (h *regrantHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			if h.holdBack(cmd) {
				<-h.gate
				err := next(context.WithoutCancel(ctx), cmds)
				h.released <- cmd.(*redis.Cmd).Val()
				return err
			}
		}
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			if h.answered(cmd) {
				time.Sleep(h.late)
			}
		}
		return err
	}
}

// TestFairGrant_HandedBackGrantNeverHeld: a grant "TERM CALL.0" is
// adoptable by every attempt of its call. W's attempt adopts the grant
// but its reply comes after RenewDeadline, so W hands the grant back;
// that release is delayed on the network. W's next attempt adopts the
// same grant again. Held, it would be deleted under W's live hold when
// the delayed release lands: W must hand it back again and hold a term
// of its own, which the delayed release leaves alone.
func TestFairGrant_HandedBackGrantNeverHeld(t *testing.T) {
	srv, rdb := startRedis(t)
	name := lockName(t)
	key := "solo:{" + name + "}:lock"
	cfg := lock.Config{TTL: 3 * time.Second}
	ha, err := mustMutex(t, newLockClient(t, rdb), name, lock.WithConfig(cfg), lock.WithFair()).Lock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	// W's grant notice comes long after its last attempt (RenewInterval
	// 100ms): W adopts the grant by an attempt. Inline calls let the
	// late reply through.
	wcfg := lock.Config{TTL: 3 * time.Second, RenewInterval: 100 * time.Millisecond, RenewDeadline: 600 * time.Millisecond}
	wrdb := newRedis(t, srv.Addr())
	hook := newRegrantHook(wcfg.RenewDeadline + 100*time.Millisecond)
	wrdb.AddHook(hook)
	wm := mustMutex(t, newLockClient(t, wrdb), name, lock.WithConfig(wcfg), lock.WithFair(), lock.WithInlineCalls())
	t.Cleanup(hook.open)
	gotW := lockAsync(t, t.Context(), wm)
	waitFor(t, func() bool { return hook.heldReplies() >= 2 }) // queued, and tried again once subscribed
	time.Sleep(2 * wcfg.RenewInterval)
	if err := ha.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	w := awaitHold(t, gotW, "W, after the release,")
	defer func() { _ = w.h.Unlock(context.Background()) }()
	hook.mu.Lock()
	delayed := hook.delayed
	hook.mu.Unlock()
	if !delayed {
		t.Fatalf("setup: W holds %q without handing back a late adoption", lock.Field(w.h))
	}
	hook.open()
	rep := <-hook.released
	if f := rdb.HKeys(t.Context(), key).Val(); len(f) != 1 || f[0] != lock.Field(w.h) {
		t.Fatalf("W holds %q (live %v), but the lock is %v once the delayed hand-back of its late adoption landed (reply %v)",
			lock.Field(w.h), w.h.Context().Err() == nil, f, rep)
	}
}
