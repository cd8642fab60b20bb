package main

import (
	"context"
	"errors"

	"github.com/redis/go-redis/v9"

	"github.com/solo-run/solo/leader"
	"github.com/solo-run/solo/leader/redisurl"
)

// refuseEviction fails solo run's start, with exit 2 naming the policy and
// the fix, when the server may evict solo's keys (leader.EvictionGuard:
// maxmemory set, maxmemory-policy not noeviction). Anything else is left
// to the elector: INFO refused (it warns once), or not answered (an
// outage it retries). A policy that appears later does not stop solo
// (watchConfig); the instance stays up and not ready until it is fixed.
func refuseEviction(ctx context.Context, client redis.UniversalClient, url string) error {
	err := leader.NewEvictionGuard(client).Check(ctx)
	if !errors.Is(err, leader.ErrEvictionPolicy) {
		return nil
	}
	_ = client.Close()
	return usageErr("redis %s: %w", redisurl.Redact(url), err)
}
