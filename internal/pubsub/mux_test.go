package pubsub_test

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/solo-run/solo/internal/pubsub"
	"github.com/solo-run/solo/internal/redistest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func waitFor(t *testing.T, what string, f func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !f() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 10s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestMux_ReferencesLiveAndRedial: a channel stays subscribed while it
// has references; a message reaches Message; a killed connection is
// replaced, the channel confirmed on the new one (Resubscribed) and live
// again; the last Remove unsubscribes it.
func TestMux_ReferencesLiveAndRedial(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	msgs := make(chan string, 8)
	resub := make(chan string, 8)
	m := pubsub.New(rdb, pubsub.Config{Every: time.Second, Pause: 10 * time.Millisecond,
		Message:      func(_, p string) { msgs <- p },
		Resubscribed: func(ch string) { resub <- ch }})
	defer m.Close()
	if _, ok := m.AddIfLive("ch"); ok {
		t.Fatal("AddIfLive took a channel nobody subscribed")
	}
	ready, err := m.Add("ch")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Add("ch"); err != nil {
		t.Fatal(err)
	}
	<-ready
	waitFor(t, "live", func() bool { return m.Live("ch") })
	subs := func() int64 { return rdb.PubSubNumSub(ctx, "ch").Val()["ch"] }
	if n := subs(); n != 1 {
		t.Fatalf("%d subscribers, want one connection for two references", n)
	}
	rdb.Publish(ctx, "ch", "hello")
	if got := <-msgs; got != "hello" {
		t.Fatalf("message %q", got)
	}
	if err := rdb.ClientKillByFilter(ctx, "TYPE", "pubsub").Err(); err != nil {
		t.Fatal(err)
	}
	select {
	case ch := <-resub:
		if ch != "ch" {
			t.Fatalf("resubscribed %q", ch)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("not resubscribed after the connection was killed")
	}
	waitFor(t, "live again", func() bool { return m.Live("ch") })
	m.Remove("ch")
	if !m.Live("ch") {
		t.Fatal("not live with one reference left")
	}
	m.Remove("ch")
	waitFor(t, "unsubscribed", func() bool { return subs() == 0 && !m.Confirmed("ch") })
	m.Close()
	if m.Live("ch") {
		t.Fatal("live after Close")
	}
	if _, err := m.Add("ch"); err == nil {
		t.Fatal("Add after Close succeeded")
	}
}
