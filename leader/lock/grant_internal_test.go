package lock

import (
	"testing"
	"time"
)

// TestMutex_GrantedOnlyWhenProvablyLater: a grant is held without a round
// trip only when its term is above the last term minted when the call's
// last attempt landed (so the grant came after that attempt's send time)
// and that attempt is recent; otherwise the next attempt adopts it.
func TestMutex_GrantedOnlyWhenProvablyLater(t *testing.T) {
	m := &Mutex{cfg: Config{RenewInterval: time.Second}}
	for _, tc := range []struct {
		name  string
		field string
		seen  uint64
		age   time.Duration
	}{
		{"term not above the last seen (a grant that lapsed before the attempt)", "100 c-1.0", 100, 0},
		{"term below the last seen", "99 c-1.0", 100, 0},
		{"nothing seen (an older server or store)", "100 c-1.0", 0, 0},
		{"attempt older than RenewInterval", "101 c-1.0", 100, time.Second},
		{"bad term", "x c-1.0", 100, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, err, done := m.granted(t.Context(), tc.field, time.Now().Add(-tc.age), tc.seen, nil)
			if done || h != nil || err != nil {
				t.Fatalf("granted = %v, %v, %v; want left to the next attempt", h, err, done)
			}
		})
	}
}
