package main

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/solo-run/solo/cmd/solo/internal/config"
	"github.com/solo-run/solo/internal/rediserr"
	"github.com/solo-run/solo/leader/redisurl"
)

// connect builds the client for cfg.Redis.URL and checks that it answers,
// retrying for a bounded time; the error names the address.
func connect(ctx context.Context, url string, wait time.Duration) (redis.UniversalClient, error) {
	client, err := newClient(url)
	if err != nil {
		return nil, err
	}
	if err := ping(ctx, client, url, wait); err != nil {
		return nil, err
	}
	return client, nil
}

// newClient builds the client for url without contacting it.
func newClient(url string) (redis.UniversalClient, error) {
	if url == "" {
		return nil, usageErr("redis.url is empty: set it in the configuration, with SOLO_REDIS_URL or with --redis")
	}
	client, err := redisurl.NewClient(url)
	if err != nil {
		return nil, usageErr("%w", err)
	}
	return client, nil
}

// ping waits until client answers, for at most wait; it closes the client
// when it gives up, and when Redis refuses it. When ctx ends first it
// returns ctx's error.
func ping(ctx context.Context, client redis.UniversalClient, url string, wait time.Duration) error {
	unreachable, err := pingFor(ctx, client, url, wait)
	if unreachable != nil || err != nil {
		_ = client.Close()
	}
	if unreachable != nil {
		return unreachable
	}
	return err
}

// pingFor is ping, but leaves the client open and returns, as unreachable,
// the error of a Redis that did not answer within wait; err is a refusal
// by the server that retrying cannot cure (a usage error naming the fix:
// redisConfigError) or ctx's error.
func pingFor(ctx context.Context, client redis.UniversalClient, url string, wait time.Duration) (unreachable, err error) {
	deadline := time.Now().Add(wait)
	for {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		err = client.Ping(pctx).Err()
		cancel()
		if err == nil {
			return nil, nil
		}
		if remedy := redisConfigError(err); remedy != "" {
			return nil, usageErr("redis %s: %s: %s", redisurl.Redact(url), config.OneLine(err.Error()), remedy)
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redis %s unreachable after %s: %w", redisurl.Redact(url), wait, dialCause(url, err)), nil
		}
		t := time.NewTimer(200 * time.Millisecond)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
	}
}

// redisConfigError returns, for an error that retrying cannot cure (a
// wrong password, a password missing, a database number the server does
// not have, an ACL that lacks a rule, a command the server does not know, a
// TLS certificate that does not verify), what to fix, naming solo's keys;
// else "". go-redis sends AUTH (or HELLO) and SELECT on every new
// connection, so the first three come back from PING.
func redisConfigError(err error) string {
	if fix := rediserr.FixIn(err, "redis.url"); fix != "" {
		return fix
	}
	return rediserr.TLSFix(err, "redis.")
}

// dialCause replaces a bare timeout by what a plain TCP dial to the first
// address says (connection refused, no such host), which names the address.
func dialCause(url string, err error) error {
	opts, perr := redisurl.Parse(url)
	if perr != nil || len(opts.Addrs) == 0 {
		return err
	}
	conn, derr := net.DialTimeout("tcp", opts.Addrs[0], time.Second)
	if derr != nil {
		return derr
	}
	_ = conn.Close()
	return err
}
