package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strings"
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
// when it gives up. When ctx ends first it returns ctx's error.
func ping(ctx context.Context, client redis.UniversalClient, url string, wait time.Duration) error {
	unreachable, err := pingFor(ctx, client, url, wait)
	if unreachable != nil {
		_ = client.Close()
		return unreachable
	}
	return err
}

// pingFor is ping, but leaves the client open and returns, as unreachable,
// the error of a Redis that did not answer within wait; err is a
// configuration error (the client is closed then) or ctx's error.
func pingFor(ctx context.Context, client redis.UniversalClient, url string, wait time.Duration) (unreachable, err error) {
	deadline := time.Now().Add(wait)
	for {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		err = client.Ping(pctx).Err()
		cancel()
		if err == nil {
			return nil, nil
		}
		if remedy := redisConfigError(err) + tlsError(err); remedy != "" {
			_ = client.Close()
			return nil, usageErr("redis %s: %s: %s", redisurl.Redact(url), config.OneLine(err.Error()), remedy)
		}
		if ctx.Err() != nil {
			_ = client.Close()
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

// redisConfigError returns, for an error of the server that retrying
// cannot cure (a wrong password, a password missing, a database number the
// server does not have, an ACL that lacks a rule, a command the server does
// not know), what to fix; else "". go-redis sends AUTH (or HELLO) and
// SELECT on every new connection, so the first three come back from PING.
func redisConfigError(err error) string {
	if _, ok := errors.AsType[redis.Error](err); !ok {
		return ""
	}
	msg := err.Error()
	switch {
	case strings.HasPrefix(msg, "ERR AUTH"), strings.HasPrefix(msg, "ERR Client sent AUTH"):
		return "the server has no password set: remove it from redis.url"
	case strings.HasPrefix(msg, "ERR DB index"), strings.HasPrefix(msg, "ERR invalid DB index"),
		strings.HasPrefix(msg, "ERR SELECT is not allowed in cluster mode"):
		return "the database number in redis.url (the /DB path) does not exist on this server"
	}
	// A wrong or missing password, an ACL that lacks a rule, a command
	// the server does not know.
	return rediserr.FixIn(err, "redis.url")
}

// tlsError returns, for a TLS handshake that failed over certificates, what
// to fix; else "". Retrying cannot cure these either.
func tlsError(err error) string {
	if _, ok := errors.AsType[*tls.CertificateVerificationError](err); ok {
		return "the server's certificate does not verify: check redis.tls_ca_file (the authority that signed it; default the system's) and redis.tls_server_name (a name it holds; default the host dialed)"
	}
	// The server's alerts come back as an unexported type (tls.AlertError
	// is QUIC's): match their text.
	msg := err.Error()
	switch {
	case strings.Contains(msg, "remote error: tls: certificate required"):
		return "the server requires a client certificate: set redis.tls_cert_file and redis.tls_key_file"
	case strings.Contains(msg, "remote error: tls: unknown certificate authority"),
		strings.Contains(msg, "remote error: tls: bad certificate"),
		strings.Contains(msg, "remote error: tls: expired certificate"):
		return "the server refused the client certificate: check redis.tls_cert_file and redis.tls_key_file (signed by an authority of the server's --tls-ca-cert-file, not expired)"
	}
	return ""
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
