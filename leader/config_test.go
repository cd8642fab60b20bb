package leader_test

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/solo-run/solo/leader"
)

func TestConfig_Validate(t *testing.T) {
	tests := []struct {
		name string
		cfg  leader.Config
		want string // exact error text; "" means valid
	}{
		{name: "defaults", cfg: leader.Config{Name: "orders-sync"}},
		// TTL×2 overflows here: the default deadline came out negative.
		{name: "largest ttl", cfg: leader.Config{Name: "a", TTL: math.MaxInt64}},
		{name: "explicit valid", cfg: leader.Config{Name: "a", TTL: 2 * time.Second, RenewInterval: 600 * time.Millisecond, RenewDeadline: 1400 * time.Millisecond, RetryInterval: 100 * time.Millisecond}},
		{name: "empty name", cfg: leader.Config{}, want: `invalid name "": must not be empty`},
		{name: "name with open brace", cfg: leader.Config{Name: "a{b"}, want: `invalid name "a{b": must not contain '{' or '}'`},
		{name: "name with close brace", cfg: leader.Config{Name: "a}"}, want: `invalid name "a}": must not contain '{' or '}'`},
		{name: "name with space", cfg: leader.Config{Name: "a b"}, want: `invalid name "a b": must not contain white space or control characters`},
		{name: "id with space", cfg: leader.Config{Name: "a", ID: "host 1"}, want: `invalid id "host 1": must not contain white space or control characters`},
		{name: "prefix with brace", cfg: leader.Config{Name: "a", KeyPrefix: "{x}"}, want: `invalid key_prefix "{x}": must not contain '{' or '}'`},
		{name: "negative ttl", cfg: leader.Config{Name: "a", TTL: -time.Second}, want: `invalid ttl -1s: must be positive`},
		{name: "ttl below a millisecond", cfg: leader.Config{Name: "a", TTL: 900 * time.Microsecond}, want: `invalid ttl 900µs: must be at least 1ms (Redis expiry has millisecond resolution)`},
		{name: "negative renew interval", cfg: leader.Config{Name: "a", RenewInterval: -1}, want: `invalid renew_interval -1ns: must be positive`},
		{name: "negative renew deadline", cfg: leader.Config{Name: "a", RenewDeadline: -time.Second}, want: `invalid renew_deadline -1s: must be positive`},
		{name: "negative retry interval", cfg: leader.Config{Name: "a", RetryInterval: -time.Second}, want: `invalid retry_interval -1s: must be positive`},
		{name: "negative resign cooldown", cfg: leader.Config{Name: "a", ResignCooldown: -time.Second}, want: `invalid resign_cooldown -1s: must be positive`},
		{name: "negative shutdown timeout", cfg: leader.Config{Name: "a", ShutdownTimeout: -time.Second}, want: `invalid shutdown_timeout -1s: must be positive`},
		{name: "renew interval equal to deadline", cfg: leader.Config{Name: "a", RenewInterval: 5 * time.Second, RenewDeadline: 5 * time.Second}, want: `invalid renew_interval 5s: must be less than renew_deadline (5s)`},
		{name: "renew interval above deadline", cfg: leader.Config{Name: "a", RenewInterval: 8 * time.Second}, want: `invalid renew_interval 8s: must be less than renew_deadline (6.666666666s)`},
		{name: "deadline equal to ttl", cfg: leader.Config{Name: "a", RenewDeadline: 10 * time.Second}, want: `invalid renew_deadline 10s: must be less than ttl×(1−drift) = 9.9s (ttl 10s, drift 0.01)`},
		{name: "deadline inside drift margin", cfg: leader.Config{Name: "a", RenewDeadline: 9950 * time.Millisecond}, want: `invalid renew_deadline 9.95s: must be less than ttl×(1−drift) = 9.9s (ttl 10s, drift 0.01)`},
		{name: "short ttl with default deadline", cfg: leader.Config{Name: "a", TTL: 3 * time.Second, RenewDeadline: 7 * time.Second}, want: `invalid renew_deadline 7s: must be less than ttl×(1−drift) = 2.97s (ttl 3s, drift 0.01)`},
		{name: "negative drift", cfg: leader.Config{Name: "a", Drift: -0.1}, want: `invalid drift -0.1: must be in [0, 0.5)`},
		{name: "drift too large", cfg: leader.Config{Name: "a", Drift: 0.5}, want: `invalid drift 0.5: must be in [0, 0.5)`},
		{name: "negative replicas", cfg: leader.Config{Name: "a", MinReplicas: -1}, want: `invalid min_replicas -1: must not be negative`},
		{name: "replica timeout too long", cfg: leader.Config{Name: "a", MinReplicas: 1, ReplicaTimeout: 4 * time.Second}, want: `invalid replica_timeout 4s: must be less than renew_deadline−renew_interval = 3.333333333s`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			if tt.want == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil || err.Error() != tt.want {
				t.Fatalf("Validate() = %v\nwant        %s", err, tt.want)
			}
			var ce *leader.ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("Validate() error %T is not a *ConfigError", err)
			}
			// New must refuse the same config with the same error.
			if _, err := leader.NewWithStore(nopLock{}, tt.cfg); err == nil || err.Error() != tt.want {
				t.Fatalf("NewWithStore() = %v, want %s", err, tt.want)
			}
		})
	}
}

func TestDefaultConfig(t *testing.T) {
	c := leader.DefaultConfig()
	if c.TTL != 10*time.Second || c.RenewInterval != c.TTL/3 || c.RenewDeadline != c.TTL*2/3 || c.KeyPrefix != "solo" || c.Drift != 0.01 {
		t.Fatalf("DefaultConfig() = %+v", c)
	}
	// Derived defaults follow the TTL in use.
	c = leader.Config{Name: "a", TTL: 3 * time.Second}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if got := c.StopBudget(); got != time.Second {
		t.Fatalf("StopBudget() = %s, want 1s", got)
	}
	if got, want := (leader.Config{Name: "orders"}).LeaseKey(), "solo:{orders}:lease"; got != want {
		t.Fatalf("LeaseKey() = %q, want %q", got, want)
	}
}
