package leader_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/solo-run/solo/internal/redistest"
	"github.com/solo-run/solo/leader"
)

// configMetrics counts the refusals an elector reports.
type configMetrics struct {
	metrics
	cmu     sync.Mutex
	refused []error
}

func (m *configMetrics) RedisConfigError(err error) {
	m.cmu.Lock()
	defer m.cmu.Unlock()
	m.refused = append(m.refused, err)
}

func (m *configMetrics) count() int {
	m.cmu.Lock()
	defer m.cmu.Unlock()
	return len(m.refused)
}

// aclUser creates the ACL user with rules, and returns a client logged in
// as it, with this package's timeouts.
func aclUser(t *testing.T, srv *redistest.Server, rules ...string) *redis.Client {
	t.Helper()
	srv.SetACLUser(t, rules...)
	return newClient(t, srv.Addr(), func(o *redis.Options) { o.Username, o.Password = redistest.ACLUser, redistest.ACLPassword })
}

// Old code: an acquire refused with NOPERM was logged as
// "acquire failed; retrying" at warn level and retried for ever, Status
// said Redis was unreachable, and nothing counted it.
func TestRedis_ConfigErrorAtStartIsReportedOnceAndCounted(t *testing.T) {
	srv := redistest.Start(t)
	client := aclUser(t, srv, "~*", "&*", "+@all", "-evalsha")
	core, logs := observer.New(zapcore.DebugLevel)
	m := &configMetrics{}
	e := mustNew(t, client, redisConfig(t, "a"), leader.WithLogger(zap.New(core)), leader.WithMetrics(m))
	runRedis(t, e, func(ctx context.Context) error { <-ctx.Done(); return nil })
	waitFor(t, 10*time.Second, "three refused acquires", func() bool { return m.count() >= 3 })

	st := e.Status()
	var ce *leader.RedisConfigError
	if !errors.As(st.ConfigErr, &ce) || !errors.Is(st.ConfigErr, leader.ErrRedisConfig) || st.RedisErr != nil || !st.Reached || st.Leading {
		t.Fatalf("Status = %+v, want ConfigErr a *RedisConfigError, RedisErr nil, Reached, not leading", st)
	}
	if want := "the ACL user lacks +evalsha; see docs/operations.md#acl"; ce.Fix != want {
		t.Fatalf("Fix = %q, want %q", ce.Fix, want)
	}
	errs := logs.FilterLevelExact(zapcore.ErrorLevel).All()
	if len(errs) != 1 || !strings.HasPrefix(errs[0].Message, "acquire refused by redis: a configuration error") ||
		!strings.Contains(errs[0].ContextMap()["error"].(string), "NOPERM") || !strings.HasSuffix(errs[0].ContextMap()["error"].(string), ce.Fix) {
		t.Fatalf("error lines = %+v, want one naming NOPERM and the fix", errs)
	}
	if n := logs.FilterLevelExact(zapcore.WarnLevel).Len(); n != 0 {
		t.Fatalf("%d warn lines, want none: %+v", n, logs.FilterLevelExact(zapcore.WarnLevel).All())
	}

	// Fixed while running: the elector leads without a restart.
	if err := srv.Client(t).Do(context.Background(), "ACL", "SETUSER", "solo", "+evalsha").Err(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "leading once the ACL is fixed", e.IsLeader)
	if st := e.Status(); st.ConfigErr != nil {
		t.Fatalf("ConfigErr = %v after the fix, want nil", st.ConfigErr)
	}
	if logs.FilterMessage("acquire answered again").Len() != 1 {
		t.Fatal(`no "acquire answered again" after the fix`)
	}
}

// Mid-run: an ACL rule removed while leading. Old code:
// every renewal failed with a warn, and the leader stepped down only at the
// renew deadline, reported as a lost lease. Now the first refused renewal
// ends the term, with the configuration error as the cause, reported once.
func TestRedis_ConfigErrorWhileLeadingStepsDownAtOnce(t *testing.T) {
	srv := redistest.Start(t)
	client := aclUser(t, srv, "~*", "&*", "+@all")
	core, logs := observer.New(zapcore.InfoLevel)
	m := &configMetrics{}
	cfg := redisConfig(t, "a")
	cfg.TTL, cfg.RenewDeadline = 20*time.Second, 15*time.Second // the deadline cannot end the term in this test
	e := mustNew(t, client, cfg, leader.WithLogger(zap.New(core)), leader.WithMetrics(m))
	cause := make(chan error, 1)
	runRedis(t, e, func(ctx context.Context) error {
		<-ctx.Done()
		select {
		case cause <- context.Cause(ctx):
		default:
		}
		return nil
	})
	waitFor(t, 10*time.Second, "leading", e.IsLeader)
	if err := srv.Client(t).Do(context.Background(), "ACL", "SETUSER", "solo", "-evalsha", "-eval").Err(); err != nil {
		t.Fatal(err)
	}
	var err error
	select {
	case err = <-cause:
	case <-time.After(10 * time.Second): // the renew deadline is 15s
		t.Fatal("the term did not end within 10s of the ACL change")
	}
	if !errors.Is(err, leader.ErrRedisConfig) || errors.Is(err, leader.ErrRenewDeadline) || !strings.Contains(err.Error(), "the ACL user lacks +evalsha") {
		t.Fatalf("term ended with cause %v, want the renewal's configuration error naming +evalsha", err)
	}
	waitFor(t, 10*time.Second, "a refused acquire after the term", func() bool { return m.count() >= 3 })
	errs := logs.FilterLevelExact(zapcore.ErrorLevel).All()
	if len(errs) != 1 || !strings.HasPrefix(errs[0].Message, "renew refused by redis: a configuration error") {
		t.Fatalf("error lines = %+v, want one: the refused renewal", errs)
	}
	if logs.FilterMessage("leadership lost").Len() != 0 {
		t.Fatal(`"leadership lost" logged: the term should end as a step-down, before its deadline`)
	}
}

// A subscription Redis refuses (an ACL without SUBSCRIBE or the notice
// channel) is reported as a configuration error too, once, while the
// election works on (followers poll). Old code: retried silently for ever,
// both for an elector's own watch and for a Hub's.
func TestRedis_RefusedSubscriptionIsAConfigError(t *testing.T) {
	for _, tt := range []struct{ name, rule, fix string }{
		{"command", "-subscribe", "the ACL user lacks +subscribe"},
		{"channel", "resetchannels", "channel patterns do not cover solo's notice channels"},
	} {
		for _, hub := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/hub=%v", tt.name, hub), func(t *testing.T) {
				srv := redistest.Start(t)
				client := aclUser(t, srv, "~*", "&*", "+@all", tt.rule)
				core, logs := observer.New(zapcore.InfoLevel)
				m := &configMetrics{}
				e := mustNew(t, client, redisConfig(t, "a"), onHub(t, client, hub, leader.WithLogger(zap.New(core)), leader.WithMetrics(m))...)
				runRedis(t, e, func(ctx context.Context) error { <-ctx.Done(); return nil })
				waitFor(t, 10*time.Second, "the refused subscription reported", func() bool { return e.Status().ConfigErr != nil })
				if err := e.Status().ConfigErr; !errors.Is(err, leader.ErrRedisConfig) || !strings.Contains(err.Error(), tt.fix) {
					t.Fatalf("ConfigErr = %v, want one naming %q", err, tt.fix)
				}
				waitFor(t, 10*time.Second, "leading", e.IsLeader) // the election works on
				waitFor(t, 10*time.Second, "three reports", func() bool { return m.count() >= 3 })
				// Without the channel the scripts' PUBLISH is refused too
				// (an acquire, once): one line per cause.
				if n := logs.FilterMessageSnippet("subscribe refused by redis").Len(); n != 1 {
					t.Fatalf("%d subscribe refusals logged, want one", n)
				}
				for _, l := range logs.FilterLevelExact(zapcore.ErrorLevel).All() {
					if !strings.Contains(l.Message, "refused by redis: a configuration error") || !strings.Contains(l.ContextMap()["error"].(string), tt.fix) {
						t.Fatalf("error line %q %v, want a configuration error naming %q", l.Message, l.ContextMap(), tt.fix)
					}
				}
			})
		}
	}
}
