package main

import (
	"testing"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/solo-run/solo/cmd/solo/internal/config"
)

// jobs[i].time_zone moves a cron job's ticks into that zone; without it
// they are UTC. Mutation: Spec returning the bare
// schedule fails with "time_zone Asia/Tokyo: next tick 2000-01-01
// 02:00:00 +0000 UTC, want 2000-01-01 17:00:00 +0000 UTC".
func TestJobConfig_TimeZone(t *testing.T) {
	cfg, err := config.Parse([]byte("election:\n  name: n\njobs:\n  - name: tokyo\n    schedule: \"0 2 * * *\"\n    time_zone: Asia/Tokyo\n  - name: utc\n    schedule: \"0 2 * * *\"\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	from := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	p := cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)
	for i, want := range []time.Time{
		time.Date(2000, 1, 1, 17, 0, 0, 0, time.UTC), // 02:00 in Tokyo (UTC+9), the next day's
		time.Date(2000, 1, 1, 2, 0, 0, 0, time.UTC),
	} {
		j := cfg.Jobs[i]
		s, err := p.Parse(j.Spec())
		if err != nil {
			t.Fatal(err)
		}
		if got := s.Next(from).UTC(); !got.Equal(want) {
			t.Errorf("time_zone %s: next tick %v, want %v", j.TimeZone, got, want)
		}
	}
}
