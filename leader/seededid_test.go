package leader

import (
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/solo-run/solo/internal/seeded"
)

// TestNew_SeededIDs: an elector made over a client the simulator gave an
// ID source takes the random part of its ID from it, per election; every
// other elector keeps a random one. New does not contact Redis.
//
// Mutation check: without the IDToken lookup in NewWithLock, "ID
// a-ba22faf13466, want a-e1.1".
func TestNew_SeededIDs(t *testing.T) {
	seededRDB := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer seededRDB.Close()
	otherRDB := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer otherRDB.Close()
	n := map[string]int{}
	undo := seeded.SetIDs(seededRDB, func(election string) string {
		n[election]++
		return election + "." + string(rune('0'+n[election]))
	})
	for _, want := range []string{"a-e1.1", "a-e1.2"} {
		e, err := New(seededRDB, Config{Name: "e1", ID: "a"})
		if err != nil {
			t.Fatal(err)
		}
		if e.ID() != want {
			t.Fatalf("ID %s, want %s", e.ID(), want)
		}
	}
	e, err := New(otherRDB, Config{Name: "e1", ID: "a"})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(e.ID(), "e1.") || len(e.ID()) != len("a-")+12 {
		t.Fatalf("ID %s over a client without a source, want a- and 12 random hex digits", e.ID())
	}
	undo()
	if e, err = New(seededRDB, Config{Name: "e1", ID: "a"}); err != nil || strings.Contains(e.ID(), "e1.") {
		t.Fatalf("ID %s (%v) after undo, want a random part", e.ID(), err)
	}
}
