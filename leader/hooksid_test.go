package leader

import (
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/solo-run/solo/internal/hooks"
)

// TestNew_HooksIDToken: an elector given the simulator's IDToken hook
// (WithHooks) takes the random part of its ID from it, per election; every
// other elector keeps a random one. New does not contact Redis.
//
// Mutation check: without the IDToken lookup in NewWithStore, "ID
// a-ba22faf13466, want a-e1.1".
func TestNew_HooksIDToken(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer rdb.Close()
	n := map[string]int{}
	h := hooks.Hooks{IDToken: func(election string) string {
		n[election]++
		return election + "." + string(rune('0'+n[election]))
	}}
	for _, want := range []string{"a-e1.1", "a-e1.2"} {
		e, err := New(rdb, Config{Name: "e1", ID: "a"}, WithHooks(h))
		if err != nil {
			t.Fatal(err)
		}
		if e.ID() != want {
			t.Fatalf("ID %s, want %s", e.ID(), want)
		}
	}
	e, err := New(rdb, Config{Name: "e1", ID: "a"})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(e.ID(), "e1.") || len(e.ID()) != len("a-")+12 {
		t.Fatalf("ID %s without the hook, want a- and 12 random hex digits", e.ID())
	}
}
