package leader

import (
	"testing"
	"time"
)

// A TTL goes to Redis as PX rounded up: truncating 10.5ms to PX 10 let the
// key die before a deadline set within a millisecond of the TTL.
func TestPxMillisRoundsUp(t *testing.T) {
	for d, want := range map[time.Duration]int64{
		time.Millisecond: 1, 1500 * time.Microsecond: 2, 1900 * time.Microsecond: 2,
		10*time.Millisecond + 500*time.Microsecond: 11, 10 * time.Second: 10000, time.Nanosecond: 1,
	} {
		if got := pxMillis(d); got != want {
			t.Errorf("pxMillis(%v) = %d, want %d", d, got, want)
		}
	}
}
