package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/solo-run/solo/leader"
)

// spreadInfo is the JSON body of a Spread's /leader: the group and the
// assignment of its jobs.
type spreadInfo struct {
	Group string `json:"group"`
	// Member is this instance's member ID.
	Member string `json:"member"`
	// Members are the live members as this instance's last heartbeat saw
	// them, with the number of jobs each ran then.
	Members []Member `json:"members"`
	// Share is this instance's share: the most jobs it starts (ceil(jobs /
	// members) when every member registered the same jobs; only members
	// that registered a job count toward it).
	Share int `json:"share"`
	// Jobs is the assignment, in job order.
	Jobs []Assignment `json:"jobs"`
	// Conflict is the lease ("TERM ID") of the election of the group's
	// name in mode elect that keeps this instance out of the group: the
	// modes of one name exclude each other, so it runs no job until that
	// lease is gone. Empty while this instance is a member.
	Conflict string `json:"conflict,omitempty"`
	// Error is set when Redis could not be asked about some job.
	Error string `json:"error,omitempty"`
}

// Assignment is one job of a group and who runs it.
type Assignment struct {
	Job      string
	Election string
	// Instance is the member whose elector holds the job's lease ("" when
	// nobody does); Holder is the lease's holder as Redis reports it (nil
	// when nobody holds it).
	Instance string
	Holder   *leader.Holder
	// Self is true when the job runs on this instance now.
	Self bool
}

// MarshalJSON writes a as one job of a Spread's /leader: job, election,
// instance (left out when empty), holder (null when nobody holds it) and
// self.
func (a Assignment) MarshalJSON() ([]byte, error) {
	// The holder in elect mode's words (/leader of a Worker):
	// leader.Holder's JSON form.
	return json.Marshal(struct {
		Job      string         `json:"job"`
		Election string         `json:"election"`
		Instance string         `json:"instance,omitempty"`
		Holder   *leader.Holder `json:"holder"`
		Self     bool           `json:"self"`
	}{a.Job, a.Election, a.Instance, a.Holder, a.Self})
}

// assignmentsRead is one read of a group's assignment for /leader.
type assignmentsRead struct {
	jobs []Assignment
	err  error
}

// info returns what /leader serves: the group as this instance knows it
// now, and the jobs' holders as a read of Redis shared through reads (one
// round trip per job), keyed by what the jobs' electors know.
func (s *Spread) info(ctx context.Context, reads *readCache[string, assignmentsRead]) spreadInfo {
	s.mu.Lock()
	info := spreadInfo{Group: s.cfg.Name, Member: s.member, Members: append([]Member(nil), s.members...), Share: s.limit, Conflict: s.conflict}
	units := s.units
	self := map[string]bool{}
	for _, u := range units {
		self[u.name] = u.held
	}
	s.mu.Unlock()
	var key strings.Builder
	for _, u := range units {
		h := u.e.Status().Holder
		fmt.Fprintf(&key, "%s %t %d %s\n", u.name, self[u.name], h.Term, h.ID)
	}
	r, age, err := reads.get(ctx, key.String())
	if err == nil {
		err = r.err
	}
	if err != nil {
		info.Error = err.Error()
	}
	info.Jobs = make([]Assignment, len(r.jobs))
	for i, a := range r.jobs {
		a.Holder = aged(a.Holder, age)
		a.Self = self[a.Job]
		info.Jobs[i] = a
	}
	return info
}

// jobNames are the names of the group's jobs in the order /leader lists
// them: the units of the running group, else the registered jobs.
func (s *Spread) jobNames() []string {
	s.mu.Lock()
	units := s.units
	s.mu.Unlock()
	var names []string
	if units == nil { // not running yet: the registered jobs
		s.tmpl.mu.Lock()
		for _, j := range s.tmpl.jobs {
			names = append(names, j.name)
		}
		s.tmpl.mu.Unlock()
		sort.Strings(names)
	} else {
		for _, u := range units {
			names = append(names, u.name)
		}
	}
	return names
}

// LookupAssignments returns who runs each job of the group cfg.Name (one
// Redis round trip per job), as solo status shows it. A job nobody runs has
// no Instance and a nil Holder. The error joins the failed lookups; the
// other jobs are still returned.
func LookupAssignments(ctx context.Context, client redis.UniversalClient, cfg leader.Config, jobs []string) ([]Assignment, error) {
	out := make([]Assignment, 0, len(jobs))
	var errs []error
	for _, name := range jobs {
		c := cfg
		c.Name = cfg.Name + "." + name
		a := Assignment{Job: name, Election: c.Name}
		h, err := leader.Lookup(ctx, client, c)
		switch {
		case err == nil:
			a.Instance = MemberOf(h.ID)
			a.Holder = &h
		case !errors.Is(err, leader.ErrNoLeader):
			errs = append(errs, fmt.Errorf("job %q: %w", name, err))
		}
		out = append(out, a)
	}
	return out, errors.Join(errs...)
}

// LookupMembers returns the live members of the group cfg.Name (their
// heartbeats not yet expired on the server's clock), in ID order, without
// pruning anything: two round trips.
func LookupMembers(ctx context.Context, client redis.UniversalClient, cfg leader.Config) ([]Member, error) {
	now, err := client.Time(ctx).Result()
	if err != nil {
		return nil, fmt.Errorf("members of %q: %w", cfg.Name, err)
	}
	pipe := client.Pipeline()
	ids := pipe.ZRangeByScore(ctx, cfg.Key("members"), &redis.ZRangeBy{Min: "(" + strconv.FormatInt(now.UnixMilli(), 10), Max: "+inf"})
	loads := pipe.HGetAll(ctx, cfg.Key("loads"))
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("members of %q: %w", cfg.Name, err)
	}
	var res []string
	for _, id := range ids.Val() {
		res = append(res, id, loads.Val()[id])
	}
	return parseMembers(res), nil
}

// Handler serves, for a Spread, /livez (fails while a job's renewal loop
// is wedged, as Handler does for one election; never for Redis), /readyz
// and /leader (the group and its assignment as JSON: group, member,
// members, share, jobs [Assignment], conflict; the holders from a read of
// Redis shared by every request for up to a second, as Handler's).
// /metrics is the metrics
// owner's to add (workerprom.Handler).
func (s *Spread) Handler() http.Handler {
	mux := http.NewServeMux()
	tolerance := (s.cfg.RenewDeadline - s.cfg.RenewInterval) / 2
	mux.HandleFunc("GET /livez", func(rw http.ResponseWriter, _ *http.Request) {
		s.mu.Lock()
		units := s.units
		s.mu.Unlock()
		for _, u := range units {
			if err := u.e.Healthy(tolerance); err != nil {
				writeText(rw, http.StatusServiceUnavailable, "job "+u.name+": "+err.Error())
				return
			}
		}
		writeText(rw, http.StatusOK, "ok")
	})
	// /readyz fails while Redis refuses the group's calls as a
	// configuration error (RedisConfigErr), with the fix in the body, and
	// while a job's campaign is refused for version skew
	// (leader.ErrProtocolSkew), as Handler's does; a job this member does
	// not campaign for (at its share) fails neither.
	mux.HandleFunc("GET /readyz", func(rw http.ResponseWriter, _ *http.Request) {
		if err := s.RedisConfigErr(); err != nil {
			writeText(rw, http.StatusServiceUnavailable, "redis configuration error: "+err.Error())
			return
		}
		if err := s.redisWait(); err != nil { // WithWaitForRedis
			writeText(rw, http.StatusServiceUnavailable, err.Error())
			return
		}
		for _, u := range s.campaigning() {
			if err := u.e.Status().ProtocolErr; err != nil {
				writeText(rw, http.StatusServiceUnavailable, "job "+u.name+": not campaigning (version skew): "+err.Error())
				return
			}
		}
		writeText(rw, http.StatusOK, "ok")
	})
	reads := newReadCache[string](func(ctx context.Context) assignmentsRead {
		jobs, err := LookupAssignments(ctx, s.client, s.cfg, s.jobNames())
		return assignmentsRead{jobs, err}
	})
	handleLeader(mux, func(ctx context.Context) (any, bool) {
		info := s.info(ctx, reads)
		return info, info.Error != ""
	})
	return mux
}
