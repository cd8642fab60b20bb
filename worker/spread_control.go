package worker

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/solo-run/solo/leader"
)

// control is Run's balancing state, used by Run's goroutine only.
type control struct {
	s         *Spread
	units     []*unit
	wg        *sync.WaitGroup
	ctx       context.Context
	first     time.Time // the first successful heartbeat
	overSince time.Time // since when this instance is over its share
	wantSince time.Time // since when this instance wants to campaign
	failing   bool      // the last heartbeat failed (logged once)
	refused   bool      // the last heartbeat was refused (logged once)
	misconfig bool      // the last heartbeat was refused as a configuration error (logged once)

	lapseTimer *time.Timer // runs Spread.lapse at memberUntil
}

// step heartbeats and rebalances once.
func (c *control) step() {
	c.s.tmpl.hooks.SettleAt("spread")
	held := c.held()
	peers, holder, sent, err := c.beat(held)
	if !c.answered(err) {
		return
	}
	if holder != "" {
		c.refuse(holder)
		return
	}
	c.confirm(sent)
	c.rebalance(held, peers)
}

// held returns the jobs this member holds and does not shed.
func (c *control) held() []string {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	var held []string
	for _, u := range c.units {
		if u.held && !u.shedding {
			held = append(held, u.name)
		}
	}
	return held
}

// beat sends one heartbeat with the jobs held; sent is when it was sent,
// err (leader.RedisConfig's) why it failed.
func (c *control) beat(held []string) (peers []peer, holder string, sent time.Time, err error) {
	s := c.s
	// Bounded like an election's calls, not by the interval: at the
	// smallest legal heartbeat no call on a real network would finish in
	// time, and a member whose every heartbeat fails never campaigns.
	// A reply later than member_ttl after the send confirms nothing.
	hctx, cancel := context.WithTimeout(c.ctx, min(max(s.sc.Heartbeat, s.cfg.RenewDeadline), s.sc.MemberTTL))
	sent = time.Now()
	peers, holder, err = s.heartbeat(hctx, held, s.sc.MemberTTL, s.sc.MemberTTL+s.cfg.TTL)
	cancel()
	return peers, holder, sent, leader.RedisConfig(err)
}

// answered records what a heartbeat's err says of Redis (a configuration
// error, an outage), logged once per episode, and reports whether the
// heartbeat was answered without error. After a failed one, once the
// membership lapsed, no job may start.
func (c *control) answered(err error) bool {
	s := c.s
	config := errors.Is(err, leader.ErrRedisConfig)
	s.mu.Lock()
	if err == nil || config { // an outage says nothing of the configuration
		s.configErr = nil
		if config {
			s.configErr = err
		}
	}
	s.answered = s.answered || err == nil || config
	s.mu.Unlock()
	if config {
		s.tmpl.metrics.HeartbeatConfigError(s.cfg.Name)
		if !c.misconfig {
			s.log.Error("heartbeat refused by redis: a configuration error, retrying will not cure it; fix it (the member retries every heartbeat meanwhile; its jobs stop once its membership lapses, member_ttl after its last accepted heartbeat)",
				zap.Error(err))
		}
		c.misconfig, c.failing = true, true
	} else if err != nil && c.ctx.Err() == nil && !c.failing {
		s.log.Warn("heartbeat failed; keeping the last view of the group", zap.Error(err))
	}
	if err != nil {
		c.failing = true
		s.mu.Lock()
		if !time.Now().Before(s.memberUntil) {
			c.stopCampaigns() // membership lapsed: no job may start
		}
		s.mu.Unlock()
		return false
	}
	if c.failing {
		s.log.Info("heartbeat works again")
		c.failing, c.misconfig = false, false
	}
	return true
}

// confirm records the membership that the heartbeat sent at sent, and
// accepted, confirms until sent + member_ttl.
func (c *control) confirm(sent time.Time) {
	s := c.s
	s.mu.Lock()
	if !sent.Before(s.memberUntil) {
		s.gen++ // a new membership: an elect-mode leader may have come between
	}
	s.memberUntil, s.conflict = sent.Add(s.sc.MemberTTL), ""
	s.mu.Unlock()
	c.lapseTimer.Reset(time.Until(sent.Add(s.sc.MemberTTL)))
	if c.refused {
		c.refused = false
		s.log.Info("joined the group: the elect-mode lease of the name is gone")
	}
	if c.first.IsZero() {
		c.first = time.Now()
	}
}

// rebalance applies the group's view, peers, to this member, which holds
// held: it sheds the excess (shedExcess), then campaigns or stops
// campaigning (campaign).
func (c *control) rebalance(held []string, peers []peer) {
	s := c.s
	load := len(held)
	mine := make([]string, len(c.units))
	for i, u := range c.units {
		mine[i] = u.name
	}
	b := plan(s.member, mine, held, peers)
	share := b.share
	members := make([]Member, len(peers))
	for i, p := range peers {
		members[i] = p.Member
	}
	m := len(members)
	now := time.Now()

	// Log lines wait until s.mu is released: a slow log sink must not hold
	// up a term that starts or ends (runTerm takes s.mu).
	var logs []func()
	defer func() {
		for _, l := range logs {
			l()
		}
	}()
	s.mu.Lock()
	defer s.mu.Unlock()
	prevM := len(s.members)
	s.members, s.limit = members, share
	if prevM != m {
		logs = append(logs, func() {
			s.log.Info("group changed", zap.Int("members", m), zap.Int("share", share), zap.Int("load", load))
		})
	}
	logs = append(logs, c.shedExcess(b, load, now)...)
	c.campaign(b, load, now)
}

// shedExcess sheds what this member holds beyond its share; s.mu is held.
// It returns the log lines to write once s.mu is released.
func (c *control) shedExcess(b balance, load int, now time.Time) (logs []func()) {
	s := c.s
	share, floor := b.share, b.floor
	// 1. Shed the excess: above the share, or at it while another member
	// is two or more below (only the first of the most loaded sheds, so
	// that they do not all shed at once).
	over := load - share
	if over <= 0 && load == share && share > floor && b.lowPeer && b.firstMax == s.member {
		over = 1
	}
	switch {
	case over <= 0:
		c.overSince = time.Time{}
	case c.overSince.IsZero():
		c.overSince = now
	}
	if over > 0 && now.Sub(c.overSince) >= s.sc.Heartbeat/2 {
		var can []*unit
		for _, u := range c.units {
			// Only a job another capable member has room for: shedding
			// one nobody else can take would leave it to run nowhere.
			if u.held && !u.shedding && now.Sub(u.since) >= s.sc.MinHold && b.room[u.name] {
				can = append(can, u)
			}
		}
		sort.Slice(can, func(i, j int) bool { return score(can[i].name, s.member) < score(can[j].name, s.member) })
		for _, u := range can[:min(over, len(can))] {
			c.shed(u)
			job, term := u.name, u.term
			logs = append(logs, func() {
				s.log.Info("shedding job to rebalance", zap.String("job", job), zap.Uint64("term", term))
			})
		}
	}
	return logs
}

// campaign campaigns for the jobs not held while below the share, or
// stops campaigning; s.mu is held.
func (c *control) campaign(b balance, load int, now time.Time) {
	s := c.s
	share, floor, minLoad := b.share, b.floor, b.minLoad
	// 2. Campaign while below the share (or the floor once every job is
	// held), the least loaded first; otherwise stop campaigning.
	// A member campaigns from its second heartbeat on (half a heartbeat
	// after its first, so not on the notice of its own joining): instances
	// started together see each other first.
	started := now.Sub(c.first) >= s.sc.Heartbeat/2
	want := started && (load < floor || (len(b.unheld) > 0 && load < share))
	// 3. Rescue: a job of ours that nobody holds while every member able
	// to run it is at or above its share would run nowhere; the least
	// loaded of them (ours, here) campaigns for it, and may run it beyond
	// its share.
	for _, u := range c.units {
		u.rescue = started && b.rescue[u.name]
	}
	if !want {
		c.wantSince = time.Time{}
		for _, u := range c.units {
			switch {
			case u.rescue && !u.running && !u.held:
				c.start(u)
			case !u.rescue && u.running && !u.held && u.cancel != nil:
				u.cancel()
				u.cancel = nil
			}
		}
		return
	}
	if c.wantSince.IsZero() {
		c.wantSince = now
	}
	// The least loaded campaign at once, the others up to a heartbeat
	// later, in proportion to how far above the least loaded they are.
	if delay := s.sc.Heartbeat * time.Duration(load-minLoad) / time.Duration(max(1, share-minLoad)); now.Sub(c.wantSince) < delay {
		return
	}
	for _, u := range c.units {
		if !u.running && !u.held {
			c.start(u)
		}
	}
}

// stopCampaigns stops campaigning for the jobs not held; s.mu is held.
func (c *control) stopCampaigns() {
	for _, u := range c.units {
		if u.running && !u.held && u.cancel != nil {
			u.cancel()
			u.cancel = nil
		}
	}
}

// refuse handles a heartbeat refused because the election of the group's
// name is held in mode elect (holder, "TERM ID"): this member is not in
// the group, so it runs nothing: it stops campaigning, sheds any job it
// still holds (none, unless Redis lost the group's keys), and says so
// once, at error level, with the fix.
func (c *control) refuse(holder string) {
	s := c.s
	if !c.refused {
		c.refused = true
		s.log.Error("not running jobs: the name is led in election.mode elect; stop every elect-mode instance of the name "+
			"(switching modes: stop the old mode's instances, the new mode's take over once its lease is gone), or give the group another name",
			zap.String("election", s.cfg.Name), zap.String("holder", holder))
	}
	c.first = time.Time{} // campaign half a heartbeat after joining, as a new member
	s.mu.Lock()
	defer s.mu.Unlock()
	s.members, s.conflict, s.memberUntil = nil, holder, time.Time{}
	c.stopCampaigns()
	for _, u := range c.units {
		if u.held && !u.shedding {
			c.shed(u)
		}
	}
}

// start starts u's campaign goroutine, unless the job's function of an
// earlier Run still runs (see straggling); s.mu is held.
func (c *control) start(u *unit) {
	s := c.s
	if c.straggling(u) {
		return
	}
	ctx, cancel := context.WithCancel(c.ctx)
	u.running, u.cancel = true, cancel
	c.wg.Go(func() {
		defer cancel()
		err := u.e.Run(ctx, func(ctx context.Context) error { return s.runTerm(ctx, u) })
		s.mu.Lock()
		// A refusal for version skew is reported while the job's campaign
		// is refused (Status.ProtocolErr outlives the campaign, for an
		// elect-mode Run to clear): a member no longer campaigning for the
		// job (at its share, or stopped) refuses nothing. Cleared before
		// the unit may campaign again, so never over a newer refusal.
		if u.m != nil && u.e.Status().ProtocolErr != nil {
			u.m.ProtocolRefused(false)
		}
		u.running, u.cancel = false, nil
		if err != nil && u.err == nil {
			u.err = fmt.Errorf("job %q: %w", u.name, err)
		}
		s.mu.Unlock()
	})
}

// shed resigns u gracefully and stops campaigning for it; s.mu is held.
//
// Shedding is a resign in every respect: the elector cancels the job,
// renews the lease while it drains (for as long as that takes: a job that
// ignores cancellation keeps its lease and is reported past the stop
// budget, as on any resign), then releases. Only then is the campaign
// cancelled, in the resign cooldown: cancelling it earlier is a shutdown to
// the elector, which stops renewing at shutdown_timeout and leaves the
// lease to expire under a job that may still run. Resign returns once the
// term ended: released, or cut short by Run's own shutdown (c.ctx), which
// ends the term by the shutdown rules.
func (c *control) shed(u *unit) {
	s := c.s
	u.shedding = true
	cancel := u.cancel
	c.wg.Go(func() {
		err := u.e.Resign(context.Background())
		if err != nil && !errors.Is(err, leader.ErrNotLeader) {
			s.log.Warn("shed job", zap.String("job", u.name), zap.Error(err))
		}
		if cancel != nil {
			cancel()
		}
	})
}

// runTerm is a unit's leader function: it runs the job unless this
// instance already runs its share, in which case it hands the term back.
func (s *Spread) runTerm(ctx context.Context, u *unit) error {
	term, _ := leader.TermFrom(ctx)
	s.mu.Lock()
	load := 0
	for _, o := range s.units {
		if o.held && !o.shedding {
			load++
		}
	}
	if !time.Now().Before(s.memberUntil) {
		s.mu.Unlock()
		return fmt.Errorf("%w: %w", errNotMember, leader.ErrResigned)
	}
	if load >= s.limit && !u.rescue {
		s.mu.Unlock()
		return fmt.Errorf("%w: %w", errOverShare, leader.ErrResigned)
	}
	ctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	u.held, u.term, u.since, u.stop = true, term, time.Now(), stop
	returned := s.run(u.name)
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		u.held, u.shedding, u.term, u.stop = false, false, 0, nil
		returned()
		s.mu.Unlock()
		select { // recount at once: a lost job may be someone's to take
		case s.kick <- struct{}{}:
		default:
		}
	}()
	if err := s.fenceGroup(ctx, u); err != nil || ctx.Err() != nil {
		return err
	}
	return u.w.term(ctx, u.w.jobs, u.e.Checkpoint, nil) // u.w's elector is u.e
}
