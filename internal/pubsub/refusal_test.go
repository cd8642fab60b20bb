package pubsub_test

import (
	"context"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/solo-run/solo/internal/pubsub"
	"github.com/solo-run/solo/internal/redistest"
)

// subscribes returns how many SUBSCRIBEs the server got, refused ones
// included.
func subscribes(t *testing.T, admin *redis.Client) int {
	t.Helper()
	info, err := admin.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	line := regexp.MustCompile(`cmdstat_subscribe:(\S+)`).FindStringSubmatch(info)
	if line == nil {
		return 0
	}
	n := 0
	for _, kv := range strings.Split(line[1], ",") {
		k, v, _ := strings.Cut(kv, "=")
		if k == "calls" || k == "rejected_calls" {
			x, _ := strconv.Atoi(v)
			n += x
		}
	}
	return n
}

// TestMux_RefusalBacksOff: a subscription the ACL refuses is reported
// once and is not live; the connection is replaced with a pause that
// doubles each time, not every Pause (10ms here: 400 SUBSCRIBEs in 4s),
// and the channel is live again once the ACL allows it.
func TestMux_RefusalBacksOff(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	client := srv.ACLClient(t, "~*", "+@all", "&other")
	var refused atomic.Int32
	m := pubsub.New(client, pubsub.Config{Every: time.Second, Pause: 10 * time.Millisecond,
		Refusal: func(err error) error {
			if strings.HasPrefix(err.Error(), "NOPERM") {
				return err
			}
			return nil
		},
		Refused: func(error) { refused.Add(1) }})
	defer m.Close()
	if _, err := m.Add("ch"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the refusal", func() bool { return m.Refusal() != nil })
	before := subscribes(t, admin)
	time.Sleep(4 * time.Second)
	n := subscribes(t, admin) - before
	t.Logf("%d SUBSCRIBEs in 4s of refusal", n)
	if n > 40 {
		t.Errorf("%d SUBSCRIBEs in 4s of refusal, want a few (a pause doubling from 10ms)", n)
	}
	if m.Live("ch") {
		t.Error("a refused channel is live")
	}
	if got := refused.Load(); got != 1 {
		t.Errorf("the refusal was reported %d times, want once", got)
	}
	if err := admin.Do(context.Background(), "ACL", "SETUSER", redistest.ACLUser, "&ch").Err(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "live once the ACL allows the channel", func() bool { return m.Live("ch") })
	if m.Refusal() != nil {
		t.Errorf("refusal %v after the channel was confirmed", m.Refusal())
	}
}
