package worker

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"hash/fnv"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/solo-run/solo/internal/bounded"
	"github.com/solo-run/solo/internal/rediserr"
)

//go:embed spread.lua
var heartbeatLua string

var heartbeatScript = redis.NewScript(heartbeatLua)

func init() { rediserr.Register("spread heartbeat", heartbeatLua) }

// membersKey, loadsKey and spreadKey are the group's keys.
func (s *Spread) membersKey() string { return s.cfg.Key("members") }
func (s *Spread) loadsKey() string   { return s.cfg.Key("loads") }
func (s *Spread) spreadKey() string  { return s.cfg.Key("spread") }

// heartbeat writes this member's heartbeat and load, its membership lasting
// ttl and its exclusion entry excl (see spread.lua), and returns the live
// members, in ID order. It returns by ctx's deadline whatever the client's
// timeouts (the reply of a call abandoned so is dropped). With ttl 0 it leaves the members, and refreshes
// its exclusion entry to excl if it has one, or removes it (excl 0).
// holder is the elect-mode lease ("TERM ID") that refused the heartbeat.
func (s *Spread) heartbeat(ctx context.Context, held []string, ttl, excl time.Duration) (members []peer, holder string, err error) {
	idle := max(10*s.sc.MemberTTL, time.Minute).Milliseconds()
	s.mu.Lock()
	jobs := make([]string, len(s.units))
	for i, u := range s.units {
		jobs[i] = u.name
	}
	s.mu.Unlock()
	list := strings.Join(jobs, " ") // names hold no white space (Add)
	// Bounded as an election's calls are: a reply that never comes costs
	// ctx's bound, not the client's read timeout.
	res, err := bounded.Call(ctx, func() ([]string, error) {
		return heartbeatScript.Run(ctx, s.client,
			[]string{s.membersKey(), s.loadsKey(), s.cfg.LeaseKey(), s.spreadKey(), s.cfg.Key("state"), s.cfg.Key("jobsets")},
			s.member, ttl.Milliseconds(), len(held), idle, s.cfg.EventsChannel(), excl.Milliseconds(),
			digest(list), list, strings.Join(held, " ")).StringSlice()
	})
	if err != nil {
		return nil, "", fmt.Errorf("heartbeat %q: %w", s.membersKey(), err)
	}
	if len(res) == 0 {
		return nil, "", fmt.Errorf("heartbeat %q: empty reply", s.membersKey())
	}
	switch res[0] {
	case "ok":
		members, err := parsePeers(res[1:], jobs)
		if err != nil {
			return nil, "", fmt.Errorf("heartbeat %q: %w", s.membersKey(), err)
		}
		return members, "", nil
	case "elect":
		if len(res) > 1 {
			holder = res[1]
		}
		return nil, holder, nil
	}
	return nil, "", fmt.Errorf("heartbeat %q: unexpected reply %q", s.membersKey(), res)
}

// peer is a live member as the last heartbeat told: its load and, when it
// publishes them, the jobs it registered and those it holds.
type peer struct {
	Member
	jobs map[string]bool // nil: published none (an older solo): taken as ours
	held []string
}

// parsePeers reads spread.lua's reply after its status: M, then M triples
// (member, load, "DIGEST HELD..."), then digest → job list pairs for every
// digest in use but ours (mine: our jobs). Members come in ID order.
func parsePeers(res []string, mine []string) ([]peer, error) {
	if len(res) == 0 {
		return nil, errors.New("no member count")
	}
	m, err := strconv.Atoi(res[0])
	if err != nil || m < 0 || len(res) < 1+3*m || (len(res)-1-3*m)%2 != 0 {
		return nil, fmt.Errorf("malformed reply %q", res)
	}
	sets := map[string]map[string]bool{}
	for i := 1 + 3*m; i+1 < len(res); i += 2 {
		sets[res[i]] = setOf(strings.Fields(res[i+1]))
	}
	own := setOf(mine)
	out := make([]peer, 0, m)
	for i := range m {
		id, load, state := res[1+3*i], res[2+3*i], res[3+3*i]
		n, _ := strconv.Atoi(load)
		p := peer{Member: Member{ID: id, Load: n}}
		if f := strings.Fields(state); len(f) > 0 {
			p.jobs, p.held = sets[f[0]], f[1:]
			if p.jobs == nil {
				p.jobs = own // our digest (the script leaves our own list out)
			}
		}
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// digest names a job list: members with the same jobs share it.
func digest(list string) string {
	h := fnv.New64a()
	_, _ = h.Write([]byte(list))
	return strconv.FormatUint(h.Sum64(), 36)
}

// parseMembers turns {id, load, …} into members in ID order.
func parseMembers(res []string) []Member {
	out := make([]Member, 0, len(res)/2)
	for i := 0; i+1 < len(res); i += 2 {
		n, _ := strconv.Atoi(res[i+1])
		out = append(out, Member{ID: res[i], Load: n})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}
