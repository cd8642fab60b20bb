package leader_test

import (
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/solo-run/solo/internal/redistest"
	"github.com/solo-run/solo/leader"
	"github.com/solo-run/solo/leader/redisurl"
)

// An embedded elector on a Sentinel failover client (redisurl's
// redis+sentinel:// URL, as examples/fxapp builds it) with MinReplicas 0
// gets none of solo run's Sentinel defaults: New says so at error, once
// per client, naming the failover window and the fix. MinReplicas 1, a
// plain client, or a second elector of the same client log nothing; an
// elector without a logger (worker.NewSpread's probe) does not use up the
// once.
// Old code: no word.
func TestSentinelWarning_EmbeddedFailoverClient(t *testing.T) {
	s := redistest.StartSentinel(t, "solo-warn")
	client, err := redisurl.NewClient("redis+sentinel://" + strings.Join(s.SentinelAddrs(), ",") + "/" + s.MasterName() + "/0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close() })
	core, logs := observer.New(zapcore.DebugLevel)
	log := leader.WithLogger(zap.New(core))
	warned := func() []observer.LoggedEntry {
		return logs.FilterMessageSnippet("unsafe election settings for Sentinel").All()
	}

	safe := redisConfig(t, "safe")
	safe.MinReplicas = 1
	mustNew(t, client, safe, log)
	mustNew(t, newClient(t, s.Primary().Addr()), redisConfig(t, "plain"), log)
	if w := warned(); len(w) != 0 {
		t.Fatalf("MinReplicas 1 or a plain client: %+v, want no warning", w)
	}
	mustNew(t, client, redisConfig(t, "probe")) // no logger: does not count
	mustNew(t, client, redisConfig(t, "a"), log)
	mustNew(t, client, redisConfig(t, "b"), log)
	w := warned()
	if len(w) != 1 || w[0].Level != zapcore.ErrorLevel {
		t.Fatalf("MinReplicas 0 on a Sentinel client: %+v, want one error line", w)
	}
	for _, want := range []string{"planned failover", "min_replicas 1", "renew_interval ttl/10", "renew_deadline ttl/2"} {
		if !strings.Contains(w[0].Message, want) {
			t.Errorf("warning %q does not name %q", w[0].Message, want)
		}
	}
}
