package lock_test

import (
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestScripts_TombstonesNeverShortened: the scripts that leave tombstones
// (abandon, fair abandon, Redlock undo, Redlock release by owner) never
// shorten the tombstones key's expiry. Mutexes of one name may have
// different TTLs: a short one's tombstone must not make a long one's
// release marks and tombstones vanish early (a re-sent last release would
// then answer "not held"). Real redis-server, each script run as sent.
func TestScripts_TombstonesNeverShortened(t *testing.T) {
	const long, short = time.Minute, time.Second
	for _, tc := range []struct {
		file string
		keys func(k string) []string
		args []any
	}{
		{"abandon.lua", func(k string) []string { return []string{k, k + ".gone"} },
			[]any{"ch", short.Milliseconds(), "1-1.1"}},
		{"fair_abandon.lua", func(k string) []string { return []string{k, k + ".gone", k + ".queue", k + ".slots"} },
			[]any{"ch", short.Milliseconds(), "1-1", "1-1.1"}},
		{"redlock_undo.lua", func(k string) []string { return []string{k, k + ".gone"} },
			[]any{short.Milliseconds(), "1-1.1"}},
		{"redlock_release_owner.lua", func(k string) []string { return []string{k, k + ".term", k + ".gone"} },
			[]any{"1-1.1", "ch", 1, short.Milliseconds()}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			_, rdb := startRedis(t)
			src, err := os.ReadFile(tc.file)
			if err != nil {
				t.Fatal(err)
			}
			keys := tc.keys("solo:{" + lockName(t) + "}:lock")
			gone := keys[1] // the tombstones
			if tc.file == "redlock_release_owner.lua" {
				gone = keys[2]
			}
			// Another Mutex's release mark, kept for its TTL of a minute.
			now := time.Now().UnixMilli()
			if err := rdb.ZAdd(t.Context(), gone, redis.Z{Score: float64(now + long.Milliseconds()), Member: "1 other"}).Err(); err != nil {
				t.Fatal(err)
			}
			rdb.PExpire(t.Context(), gone, long)
			if err := redis.NewScript(string(src)).Run(t.Context(), rdb, keys, tc.args...).Err(); err != nil && err != redis.Nil {
				t.Fatal(err)
			}
			if left := rdb.PTTL(t.Context(), gone).Val(); left < long/2 {
				t.Fatalf("%s with a %s tombstone cut the tombstones key's expiry from %s to %s: another Mutex's marks vanish early",
					tc.file, short, long, left)
			}
		})
	}
}
