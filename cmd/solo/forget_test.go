package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/solo-run/solo/internal/redistest"
)

// solo forget deletes an election's term and checkpoints, and refuses, in
// one line with exit 6, while a lease is held; keys
// of other elections, and of a lock of the same name, stay. Mutation: without the lease check in the
// script this fails with "forget while leading = 0 ..., want 6".
func TestForget(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	rc := srv.Client(t)
	env := []string{"SOLO_CONFIG=/dev/null", "SOLO_REDIS_URL=redis://" + srv.Addr()}
	forget := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := run(append([]string{"forget"}, args...), &out, &errb, env)
		return code, out.String(), errb.String()
	}
	mine := []string{"solo:{n*}:term", "solo:{n*}:cp:cron:report", "solo:{n*}:cp:failed-terms"}
	// A lock of the same name keeps its keys: it may be held right now.
	others := []string{"solo:{n*2}:term", "solo:{nx}:term", "other:{n*}:term", "solo:{n*}:lock", "solo:{n*}:lock.term"}
	for _, k := range append(append([]string(nil), mine...), others...) {
		if err := rc.Set(ctx, k, "1", 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := rc.Set(ctx, "solo:{n*}:lease", "1795316457433330 a-01725607074c", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	code, out, errs := forget("n*")
	if code != exitLeading || out != "" || errs != "solo: n*: a-01725607074c leads (term 1795316457433330): stop every instance first (or solo resign it), then forget\n" {
		t.Fatalf("forget while leading = %d %q %q, want %d and one line", code, out, errs, exitLeading)
	}
	if n := rc.Exists(ctx, mine...).Val(); n != int64(len(mine)) {
		t.Fatalf("%d of %d keys left after a refused forget", n, len(mine))
	}
	rc.Del(ctx, "solo:{n*}:lease")
	code, out, errs = forget("--name", "n*")
	if code != 0 || out != "n*: forgot 3 keys (solo:{n*}:cp:cron:report solo:{n*}:cp:failed-terms solo:{n*}:term)\n" || errs != "" {
		t.Fatalf("forget = %d %q %q", code, out, errs)
	}
	if n := rc.Exists(ctx, mine...).Val(); n != 0 {
		t.Fatalf("%d keys of the election left after forget", n)
	}
	if n := rc.Exists(ctx, others...).Val(); n != int64(len(others)) {
		t.Fatalf("forget deleted keys of other elections: %d of %d left", n, len(others))
	}
	code, _, errs = forget()
	if code != exitUsage || !strings.Contains(errs, "solo forget NAME") {
		t.Fatalf("forget without a name = %d %q", code, errs)
	}
}
