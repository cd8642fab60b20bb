package sim

import (
	"context"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// TestShapes_MemoryPolicy: a client asking the simulated server for its
// memory configuration, as a candidate checking for an evicting policy
// does, reads the plan's: `INFO memory`'s maxmemory and maxmemory_policy
// lines, and CONFIG GET's pairs.
func TestShapes_MemoryPolicy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := NewPlan(5, Options{})
		p.Memory = Memory{Max: 1 << 20, Policy: "volatile-lru"}
		w := newWorld(p, time.Now())
		c, err := newCandidate(w, 0)
		if err != nil {
			t.Fatal(err)
		}
		w.cands = append(w.cands, c)
		go w.loop()
		defer func() {
			close(w.stop)
			<-w.loopDone
			_ = c.cl.rdb.Close()
			w.stopSettler()
		}()
		ctx := context.Background()
		info, err := c.cl.rdb.Info(ctx, "memory").Result()
		if err != nil || !strings.Contains(info, "\r\nmaxmemory:1048576\r\n") || !strings.Contains(info, "\r\nmaxmemory_policy:volatile-lru\r\n") {
			t.Errorf("INFO memory = %q, %v; want maxmemory:1048576 and maxmemory_policy:volatile-lru lines", info, err)
		}
		cfg, err := c.cl.rdb.ConfigGet(ctx, "maxmemory-policy").Result()
		if err != nil || cfg["maxmemory-policy"] != "volatile-lru" {
			t.Errorf("CONFIG GET maxmemory-policy = %v, %v; want volatile-lru", cfg, err)
		}
		if !p.Memory.Evicts() || !p.Memory.Unsafe() || (Memory{Policy: "noeviction", Max: 1}).Unsafe() {
			t.Errorf("Memory.Evicts/Unsafe disagree with the policy")
		}
	})
}
