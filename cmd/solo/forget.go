package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/solo-run/solo/internal/rediserr"
	"github.com/solo-run/solo/leader"
)

// exitLeading: solo forget refused because a leader holds the lease.
const exitLeading = 6

// forgetScript deletes the keys it is given (an election's term,
// checkpoints and other keys, KEYS[2..]) only if the lease, KEYS[1], is
// absent, in one step: a leader that acquires between solo's check and
// the deletion cannot exist, so no term in use loses its record and no
// checkpoint written under a live lease is deleted. It returns -1 when a
// lease is held, else the number of keys deleted.
var forgetScript = redis.NewScript(forgetLua)

const forgetLua = `
if redis.call('EXISTS', KEYS[1]) == 1 then
  return -1
end
local n = 0
for i = 2, #KEYS do
  n = n + redis.call('DEL', KEYS[i])
end
return n
`

func init() { rediserr.Register("forget", forgetLua) }

// forgetCommand deletes an election's keys: see the usage text.
func forgetCommand(args []string, stdout, stderr io.Writer, env []string) error {
	fs := flag.NewFlagSet("solo forget", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c common
	c.register(fs, "forget", true)
	cfg, name, err := c.loadOne(fs, "forget", args, env)
	if err != nil {
		return err
	}
	ctx := context.Background()
	client, err := connect(ctx, cfg.Redis.ClientURL(), 3*time.Second)
	if err != nil {
		return err
	}
	defer client.Close()
	lc := cfg.LeaderConfig()
	lc.Name = name
	keys, err := electionKeys(ctx, client, lc)
	if err != nil {
		return fmt.Errorf("%s: list keys: %w", name, err)
	}
	n, err := forgetScript.Run(ctx, client, append([]string{lc.LeaseKey()}, keys...)).Int64()
	if err != nil {
		return fmt.Errorf("%s: delete keys: %w", name, err)
	}
	if n < 0 {
		h, lerr := leader.Lookup(ctx, client, lc)
		if lerr == nil {
			return &codeError{code: exitLeading, err: fmt.Errorf("%s: %s leads (term %d): stop every instance first (or solo resign it), then forget", name, h.ID, h.Term)}
		}
		return &codeError{code: exitLeading, err: fmt.Errorf("%s: a leader holds the lease: stop every instance first, then forget", name)}
	}
	noun := "keys"
	if n == 1 {
		noun = "key"
	}
	fmt.Fprintf(stdout, "%s: forgot %d %s (%s)\n", name, n, noun, strings.Join(keys, " "))
	return nil
}

// electionKeys lists the election's keys but the lease: the term, info,
// candidates and cp:* keys under PREFIX:{NAME}:, on every primary of a
// Cluster (the hash tag puts them all on one). Other keys under the same
// tag are not the election's: a lock of the same name (package
// leader/lock: PREFIX:{NAME}:lock…) may be held right now, and forgetting
// its term key would be forgetting a lock someone holds.
func electionKeys(ctx context.Context, client redis.UniversalClient, lc leader.Config) ([]string, error) {
	prefix := lc.Key("")
	pattern := globEscape(prefix) + "*"
	mine := func(k string) bool {
		switch suffix := strings.TrimPrefix(k, prefix); suffix {
		case "term", "info", "candidates":
			return true
		default:
			return strings.HasPrefix(suffix, "cp:")
		}
	}
	var mu sync.Mutex
	var keys []string
	scan := func(ctx context.Context, c redis.Cmdable) error {
		it := c.Scan(ctx, 0, pattern, 1000).Iterator()
		for it.Next(ctx) {
			if k := it.Val(); mine(k) {
				mu.Lock()
				keys = append(keys, k)
				mu.Unlock()
			}
		}
		return it.Err()
	}
	var err error
	if cc, ok := client.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return scan(ctx, c) })
	} else {
		err = scan(ctx, client)
	}
	if err != nil {
		return nil, err
	}
	sort.Strings(keys)
	if len(keys) == 0 {
		keys = []string{lc.TermKey()} // nothing to delete; the script still checks the lease
	}
	return keys, nil
}

// globEscape escapes the glob characters of Redis's MATCH in s.
func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}
