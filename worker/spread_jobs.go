package worker

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/solo-run/solo/leader"
)

// CheckJobs returns an error wrapping ErrNoJobs, naming the group and how
// to register jobs, when WithJobsRequired was given and no job is
// registered; else nil (see Worker.CheckJobs).
func (s *Spread) CheckJobs() error { return s.tmpl.CheckJobs() }

// Jobs returns the names of the registered jobs, in name order.
func (s *Spread) Jobs() []string { return s.tmpl.Jobs() }

// noJobs is Run's check of n registered jobs: CheckJobs's error, or, with
// none registered and none required, a warning.
func (s *Spread) noJobs(n int) error {
	if n > 0 {
		return nil
	}
	if err := s.CheckJobs(); err != nil {
		return err
	}
	s.log.Warn(noJobsWarning)
	return nil
}

// LookupJobs returns the jobs of the group cfg.Name as its live members
// registered them (the union, in name order; NAME/I for a shard), read
// from what their heartbeats publish beside the membership: the digest
// of each member's job list (key state) and the list of each digest
// (key jobsets). A member of a solo that publishes no list adds none.
// No live member: no job, no error. Three round trips, nothing written.
func LookupJobs(ctx context.Context, client redis.UniversalClient, cfg leader.Config) ([]string, error) {
	members, err := LookupMembers(ctx, client, cfg)
	if err != nil || len(members) == 0 {
		return nil, err
	}
	pipe := client.Pipeline()
	states := pipe.HGetAll(ctx, cfg.Key("state"))
	sets := pipe.HGetAll(ctx, cfg.Key("jobsets"))
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("jobs of %q: %w", cfg.Name, err)
	}
	seen := map[string]bool{}
	for _, m := range members {
		digest, _, _ := strings.Cut(states.Val()[m.ID], " ")
		for _, job := range strings.Fields(sets.Val()[digest]) {
			seen[job] = true
		}
	}
	jobs := make([]string, 0, len(seen))
	for job := range seen {
		jobs = append(jobs, job)
	}
	sort.Strings(jobs)
	return jobs, nil
}
