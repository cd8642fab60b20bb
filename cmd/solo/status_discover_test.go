package main

import (
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/solo-run/solo/internal/redistest"
	"github.com/solo-run/solo/leader"
	"github.com/solo-run/solo/worker"
)

// A spread group built in code (worker.NewSpread, workerfx.SpreadModule)
// lists its jobs in no configuration file: `solo status` in election.mode
// spread, given only the group's name, reads them from what the members'
// heartbeats publish, and shows each job's election; an empty group
// exits 3 saying how to name the jobs. Old code: "election.mode spread:
// list the group's jobs in the configuration (jobs:)", exit 2.
func TestStatus_SpreadGroupBuiltInCode(t *testing.T) {
	srv := redistest.Start(t)
	url := "redis://" + srv.Addr()
	client := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = client.Close() })
	s, err := worker.NewSpread(client, leader.Config{Name: "coded", ID: "svc", TTL: 2 * time.Second}, worker.SpreadConfig{})
	if err != nil {
		t.Fatal(err)
	}
	idle := func(ctx context.Context, _ int) error { <-ctx.Done(); return nil }
	if err := s.Sharded("orders", 2, idle); err != nil {
		t.Fatal(err)
	}
	if err := s.Pull("sync", func(ctx context.Context) error { return idle(ctx, 0) }); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	reader := append(testEnv(url, "coded", "reader"), "SOLO_ELECTION_MODE=spread") // SOLO_CONFIG=/dev/null: no jobs:
	var group struct {
		Jobs []struct {
			Job      string `json:"job"`
			Election string `json:"election"`
			Instance string `json:"instance"`
		} `json:"jobs"`
	}
	var text string
	waitFor(t, 15*time.Second, "every job held", func() bool {
		var code int
		code, text = soloRun(t, reader, "status", "--json")
		return code == 0 && json.Unmarshal([]byte(text), &group) == nil && len(group.Jobs) == 3
	})
	for i, want := range []string{"orders/0", "orders/1", "sync"} {
		if j := group.Jobs[i]; j.Job != want || j.Election != "coded."+want || !strings.HasPrefix(j.Instance, "svc-") {
			t.Errorf("job %d = %+v, want %s, election coded.%s, instance svc-…", i, j, want, want)
		}
	}
	code, text := soloRun(t, reader, "status")
	if code != 0 || !regexp.MustCompile(`(?m)^orders/1\s+svc-\S+\s+\d+`).MatchString(text) {
		t.Errorf("status = %d, want job orders/1's row with its holder:\n%s", code, text)
	}
	// A job by name, its election found the same way.
	code, text = soloRun(t, reader, "status", "--json", "sync")
	if code != 0 || !strings.Contains(text, `"election": "coded.sync"`) {
		t.Errorf("status sync = %d, want the election coded.sync:\n%s", code, text)
	}

	empty := append(testEnv(url, "nobody", "reader"), "SOLO_ELECTION_MODE=spread")
	code, text = soloRun(t, empty, "status")
	if code != exitNoLeader || !strings.Contains(text, "no live member publishes its jobs") || !strings.Contains(text, "solo status nobody.JOB") {
		t.Errorf("status of an empty group = %d, want 3 saying how to name the jobs:\n%s", code, text)
	}
}
