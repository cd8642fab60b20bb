package sim

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/solo-run/solo/internal/hooks"
	"github.com/solo-run/solo/leader/lock"
)

// Lock schedules run the real leader/lock code (lock.Client, Mutex, Hold,
// watchdog, pub/sub waiters) over the simulated server, under the same
// plan of faults as the election's schedules (NewPlan: per-call delays and
// losses, stalls, data loss, failovers, a lagging replica, process
// pauses, client timeout settings), with lock holders in place of
// electors: every candidate of the plan is one process with one
// lock.Client and one to three goroutines that Lock, TryLock, LockTimeout,
// re-enter (nested, and from a goroutine sharing the hold's context), try
// again with a context that does not carry the hold, make fenced writes
// while they hold, and Unlock; a fifth of the processes close their Client
// at a random time while they may hold or wait. 15% of schedules use a
// fixed lease (WithFixedLease). With Options.LockConns, requests travel
// on connections with fates of their own (lock_conn.go), a fifth of the
// schedules are fair (WithFair, lock_fair.go), 15% Redlock (lock_redlock.go)
// and a third use WithInlineCalls, and invariants L6–L8 (lock_calls.go)
// join these.
//
// Invariants, checked against the simulated server's own state:
//
//	L1 no two holds of different terms are live (context not cancelled)
//	   at once, and a live hold's "TERM OWNER" is the server's unexpired
//	   lock (at its start and at every fenced write); after a data loss or
//	   a failover without MinReplicas (the lock takes no WAIT, so every
//	   such failover may lose writes) an overlap is out of the model if
//	   the newer term is the larger, so the fence refuses the older;
//	   otherwise it is a violation (under MinReplicas a failover is in
//	   the model);
//	L2 the server never mints a term at or below an earlier one, data loss
//	   included, and holds are handed out in increasing term order;
//	L3 a term's hold contexts are cancelled no later than the send time of
//	   its last successful renewal (or acquire) + RenewDeadline
//	   (TTL×(1−Drift) for a fixed lease);
//	L4 the lock is deleted only when its count reaches zero with no hold
//	   of the term handed out and not unlocked, the server never counts
//	   fewer holds than are held, abandon never deletes a held term, a
//	   context without the hold never gets a hold of an existing term, and
//	   a context carrying a live hold re-enters it;
//	L5 Client.Close returns within RenewDeadline + 100ms (plus any log
//	   stall it meets) and leaves no hold context live, and every
//	   application goroutine (waiters, holders, re-entries) ends within a
//	   bound once its contexts ended;
//	L10 a request run twice by the client's retry answers as once: an
//	   acquire never answers "held" by its own attempt, a release that
//	   released never answers "not held" on its second run (after a
//	   failover or data loss between the runs, out of the model); a
//	   release of one hold run twice may take a second hold off Redis's
//	   advisory count (lockStore.Release) (lock_shapes.go).

const lockName = "sim"

// lockWorld is a lock schedule's processes, pub/sub connections and
// checker state, under world.mu unless noted.
type lockWorld struct {
	w      *world
	cfg    lock.Config // the longest of every process's Mutex timings (fixed lease applied): the schedule's bounds
	fixed  bool
	mixed  bool            // its Mutexes have timings of their own (lockWorld.timings)
	twice  map[string]bool // attempts whose acquire ran twice and answered held by themselves (R1), fields a release of one hold ran twice for
	procs  []*lockProc
	tracks map[string]*leaseRec // by field "TERM OWNER"

	conns     map[*psConn]struct{}
	downUntil time.Time
	tornDown  bool
	wg        sync.WaitGroup // the pub/sub connections' goroutines

	lastMint   uint64
	maxStarted uint64
	fenceTerm  uint64
	fenceBy    string
	losses     []time.Time
	lossWhy    []string
	stats      LockStats

	// The connection model (Options.LockConns; lock_conn.go,
	// lock_calls.go, lock_fair.go, lock_redlock.go).
	connModel bool
	inline    bool                // WithInlineCalls: a call waits for its reply, however late
	fair      *fairTrack          // WithFair schedules: the queue's entries
	redlock   bool                // Redlock schedules: masters instead of the replicated server
	masters   []*rlMaster         // Redlock's masters
	channel   string              // the lock's notice channel
	owners    map[string]*callRec // by attempt owner
	calls     map[string]*callRec // by call (an owner up to its last '.')
	byField   map[string][]*callRec
	callN     int
	calmAt    time.Time // L7 and L8 judge from here on
	ended     time.Time // the application's contexts ended: L7 stops judging
	frees     []freeEvent
	rlSent    map[string]time.Time // Redlock: latest send of an acquire won, by owner
	rlRenew   map[string]time.Time // Redlock: latest send of a renewal won, by owner
}

// LockStats are a lock schedule's counters (in Result.Lock).
type LockStats struct {
	Holds, Reentries, Writes, StaleRefused   int
	NotObtained, LockErrors, UnlockErrors    int
	Lost                                     map[string]int // hold contexts ended other than by Unlock, by cause
	NoticesDelivered, Reconnects, CloseWaits int
	// LateConfirms counts acquires confirmed RenewDeadline or more after
	// their send (the lock hands them back).
	LateConfirms int
	// Mode is the schedule's lock mode: "plain", "fair" or "redlock"
	// (with "+inline" for WithInlineCalls).
	Mode string
	// Findings counts the violations that carry a label (LabelStaleRelease
	// …), by label.
	Findings map[string]int
	// Judged counts, by invariant of the connection model (L1 for Redlock
	// holds, L6–L8), the checks that could have found a violation.
	Judged map[string]int
}

// leaseRec is the checker's view of one term of the lock.
type leaseRec struct {
	field    string
	term     uint64
	proc     int
	minted   time.Time // zero if not seen (data loss wiped the mint? never: always seen)
	acqSent  time.Time // send time of the latest acquire that returned it
	renewOK  time.Time // send time of the latest renewal that returned true
	started  bool      // its first hold was handed out
	ctx      context.Context
	cancelAt time.Time
	app      int // holds handed out and not yet unlocked
	deleted  bool
	// adoptHeard: when the latest adoption of it whose reply reached
	// its caller executed; heldFrom: adoptHeard when its first hold was
	// handed out (zero: the hold came from the acquire that minted it).
	// An adoption no caller heard makes no hold (connection model).
	adoptHeard time.Time
	heldFrom   time.Time
}

// lockProc is one process: a lock.Client over its own connection.
type lockProc struct {
	w       *world
	lw      *lockWorld
	idx     int
	plan    CandPlan
	cfg     lock.Config   // its Mutex's, as resolved (timings of its own: lockWorld.timings)
	grants  bool          // fair: it takes a release's grant (lockStore.TakesGrants)
	retries uint64        // requests sent again after a connection reset (retried), under w.mu
	n       map[op]uint64 // call counters, under w.mu
	rdb     *redis.Client
	client  *lock.Client
	m       *lock.Mutex
	pools   []*connPool     // by server (connection model)
	blips   []Window        // network blips (connection model)
	rdbs    []*redis.Client // Redlock: one client per master
	// closing is when Client.Close was called (zero: not yet), under w.mu.
	closing time.Time
	psN     map[int]uint64    // pub/sub connections dialled, by server, under w.mu
	sends   map[string]uint64 // requests sent, by sendAlone's key, under w.mu
	// idRandom is the Client's ID with its random part, "pN-RANDOM"
	// (stripID), once seen, under w.mu.
	idRandom string
	open     []*callRec // its Lock, TryLock and LockTimeout calls not returned, oldest first, under w.mu
	// resubscribed: when a SUBSCRIBE was last confirmed to the process
	// (a confirmation on a new connection wakes every waiter), under w.mu.
	resubscribed time.Time
}

// Invariant names of the lock schedules, as printed.
const (
	InvLockExcl     = "L1 lock holds exclusive, and the server's"
	InvLockTerms    = "L2 lock terms strictly increase"
	InvLockDeadline = "L3 hold cancelled by last renewal's send time + RenewDeadline"
	InvLockCount    = "L4 re-entry counts"
	InvLockLeak     = "L5 lock goroutines end"
)

// wake is client.wake for a lock process.
func (p *lockProc) wake(t time.Time) time.Time {
	return p.plan.wake(p.w.start, t)
}

// roundTrip sends one lock request and waits for its reply as a go-redis
// client with this process's options would (see client.roundTripKey).
func (p *lockProc) roundTrip(ctx context.Context, o op, exec func(now time.Time) lockRes) (lockRes, error) {
	w := p.w
	w.mu.Lock()
	p.n[o]++
	n := p.n[o]
	w.stats.Calls++
	if err := ctx.Err(); err != nil {
		w.event(p.idx, evReturn, o, n, 0, 0, "not sent: "+err.Error())
		w.mu.Unlock()
		return lockRes{}, err
	}
	now := time.Now()
	cp := w.drawCall(p.idx, o, n, now)
	depart := p.wake(now)
	execAt := w.execAt(depart.Add(cp.req))
	flags := ""
	switch {
	case cp.lostReq:
		flags = " LOST-REQUEST"
	case cp.lostRep:
		flags = " LOST-REPLY"
	}
	if depart.After(now) {
		flags += " (paused: sent at wake-up)"
	}
	if !execAt.Equal(depart.Add(cp.req)) {
		flags += " (stalled)"
	}
	w.event(p.idx, evSend, o, n, int64(cp.req), int64(cp.rep), flags)
	done := make(chan lockRes, 1)
	w.at(execAt, func(t time.Time) {
		if cp.lostReq {
			return
		}
		res := exec(t)
		w.event(p.idx, evExec, o, n, 0, 0, res.String(o))
		w.at(p.wake(t.Add(res.wait+cp.rep)), func(time.Time) {
			switch {
			case cp.lostRep:
			case res.epoch != w.epoch:
				w.event(p.idx, evReturn, o, n, 0, 0, "reply lost: the connection dropped (failover or restart)")
			default:
				done <- res
			}
		})
	})
	w.mu.Unlock()

	res, err := awaitReply(ctx, w, p.plan, depart, now, done, "")
	w.mu.Lock()
	if err != nil {
		w.event(p.idx, evReturn, o, n, 0, 0, "error: "+err.Error())
	} else {
		w.event(p.idx, evReturn, o, n, 0, 0, "ok")
	}
	w.mu.Unlock()
	return res, err
}

// lockStore is a process's hooks.Store: the scripts on the simulated
// server, over the simulated network.
type lockStore struct {
	p       *lockProc
	channel string
	ttl     time.Duration
	fair    bool
	grants  bool // fair: its calls take a release's grant (hooks.Granter)
}

// TakesGrants is hooks.Granter: a fair Mutex over s takes grants when
// its process does.
func (s *lockStore) TakesGrants() bool { return s.grants }

// send runs exec on the server as one request of owner's call: over a
// connection (the connection model) or with a per-call fate.
func (s *lockStore) send(ctx context.Context, o op, owner, what string, cleanup bool, exec func(now time.Time) lockRes) (lockRes, error) {
	if s.p.lw.connModel {
		return s.p.retried(ctx, o, func() (lockRes, error) {
			return s.p.netCall(ctx, 0, o, owner, what, cleanup, func(now time.Time) lockRes {
				res := exec(now)
				s.p.lw.watchExpiry(now)
				return res
			})
		})
	}
	return s.p.roundTrip(ctx, o, exec)
}

func (s *lockStore) Acquire(ctx context.Context, owner string, adopt []string, reenter string, wait bool) (hooks.AcquireReply, error) {
	sent := time.Now()
	adopt = slices.Clone(adopt)
	lw := s.p.lw
	var rec *callRec
	if lw.connModel && reenter == "" {
		s.p.w.mu.Lock()
		rec = lw.callOf(ctx, owner)
		lw.attemptSent(rec, sent)
		s.p.w.mu.Unlock()
	}
	var execAt time.Time // under w.mu
	res, err := s.send(ctx, opLAcquire, owner, fmt.Sprint(owner, adopt, reenter, wait), false, func(now time.Time) lockRes {
		execAt = now
		if rec != nil {
			rec.lastExec = now
		}
		var res lockRes
		if s.fair {
			res = s.p.w.execLockFairAcquire(now, owner, adopt, reenter, s.ttl, wait, s.grants, fairSlot(s.ttl, s.p.cfg.RetryInterval))
		} else {
			res = s.p.w.execLockAcquire(now, owner, adopt, reenter, s.ttl)
		}
		if c := res.rep.Code; c == hooks.CodeAcquired || c == hooks.CodeAdopted || c == hooks.CodeReentered {
			s.p.lockWait(now, &res)
		}
		return res
	})
	if rec != nil {
		s.p.w.mu.Lock()
		lw.attemptReturned(rec, err == nil && res.rep.Code == hooks.CodeHeld, sent, execAt)
		if err == nil && res.rep.Code == hooks.CodeHeld {
			// A grant's hold is timed from it (Mutex.granted); an answer
			// to an attempt the call gave up on comes late, unheard.
			rec.heldSent = maxTime(rec.heldSent, sent)
		}
		s.p.w.mu.Unlock()
	}
	if err != nil {
		return hooks.AcquireReply{}, fmt.Errorf("acquire: %w", err)
	}
	if res.rep.Code == hooks.CodeHeld && ownerOf(res.rep.Holder) == owner {
		s.p.w.mu.Lock()
		s.p.ranTwice(fmt.Sprintf("an acquire of %s answered held by its own attempt (%q)", owner, res.rep.Holder), ShapeRetryHeld)
		if lw.twice == nil {
			lw.twice = map[string]bool{}
		}
		lw.twice[owner] = true
		s.p.w.mu.Unlock()
	}
	if c, n := res.rep.Code, s.p.cfg.MinReplicas; res.acked < int64(n) && (c == hooks.CodeAcquired || c == hooks.CodeAdopted || c == hooks.CodeReentered) {
		return res.rep, fmt.Errorf("acquire: %d of %d replicas acknowledged: %w", res.acked, n, lock.ErrNotReplicated)
	}
	if c := res.rep.Code; c == hooks.CodeAcquired || c == hooks.CodeAdopted {
		field := res.rep.Field
		if field == "" {
			field = fmt.Sprintf("%d %s", res.rep.Term, owner)
		}
		s.p.w.mu.Lock()
		if time.Since(sent) >= s.p.cfg.RenewDeadline {
			lw.stats.LateConfirms++
		}
		r := s.p.lw.rec(field)
		r.acqSent = maxTime(r.acqSent, sent)
		if c == hooks.CodeAdopted {
			r.adoptHeard = execAt
		}
		s.p.w.mu.Unlock()
	}
	return res.rep, nil
}

func (s *lockStore) Renew(ctx context.Context, field string) (bool, error) {
	sent := time.Now()
	res, err := s.send(ctx, opLRenew, ownerOf(field), field, false, func(now time.Time) lockRes {
		res := s.p.w.execLockRenew(now, field, s.ttl)
		if res.n == 1 {
			s.p.lockWait(now, &res)
		}
		return res
	})
	if err != nil {
		return false, fmt.Errorf("renew: %w", err)
	}
	if n := s.p.cfg.MinReplicas; res.n == 1 && res.acked < int64(n) {
		return false, fmt.Errorf("renew: %d of %d replicas acknowledged", res.acked, n)
	}
	if res.n == 1 {
		s.p.w.mu.Lock()
		r := s.p.lw.rec(field)
		r.renewOK = maxTime(r.renewOK, sent)
		s.p.w.mu.Unlock()
	}
	return res.n == 1, nil
}

func (s *lockStore) Release(ctx context.Context, field string, last bool) (int64, error) {
	sent := time.Now()
	// Under w.mu: a run of this request released field, the server's
	// epoch at that run, and whether the last run answered "not held"
	// after it (refaulted: with a failover or data loss in between).
	var (
		released, rerunLost, refaulted bool
		epoch                          uint64
	)
	res, err := s.send(ctx, opLRelease, ownerOf(field), fmt.Sprint(field, last), true, func(now time.Time) lockRes {
		w := s.p.w
		if lw := s.p.lw; released && !last {
			// A release of one hold run twice takes a second hold off
			// Redis's count (never below 1, never a delete): that count
			// is advisory, as nothing reads it (the process's own count
			// decides the last release, which deletes whatever the
			// count; a re-entry checks the field only), so L10 allows
			// it and L4 does not judge the field's count any more.
			if lw.twice == nil {
				lw.twice = map[string]bool{}
			}
			lw.twice[field] = true
		}
		res := w.execLockRelease(now, field, last, s.fair, s.channel, s.ttl)
		s.p.lw.staleRelease(field, sent, res)
		// (A release of one hold deletes nothing: when its second run
		// finds the field gone, something else ended the term in
		// between, the term's last release or the key's expiry, and
		// "not held" is true.)
		rerunLost = res.n == -1 && released && last
		refaulted = epoch != w.epoch
		if res.n >= 0 && !released {
			released, epoch = true, w.epoch
		}
		return res
	})
	if err != nil {
		return 0, fmt.Errorf("release: %w", err)
	}
	// Judged when the Mutex takes the answer (Unlock's ErrLockLost):
	// within RenewDeadline of its send (its call's bound; inline over a
	// client that ignores deadlines, a later "not held" counts as no
	// answer, Mutex.release). A run that lands later (the release's
	// mark lives a TTL) answers nobody.
	if rerunLost && time.Since(sent) <= s.p.cfg.RenewDeadline {
		s.p.w.mu.Lock()
		if refaulted {
			// The failover or data loss may have lost the first run's
			// writes (a release takes no WAIT): "not held" is then the
			// new server's truth.
			s.p.w.outOfModel("lock release run again after a failover or data loss")
		} else {
			s.p.ranTwice(fmt.Sprintf("a release of %q (last %v) answered not held after an earlier run of the same request released it", field, last), ShapeRetryLost)
		}
		s.p.w.mu.Unlock()
	}
	return res.n, nil
}

func (s *lockStore) Abandon(ctx context.Context, call string, owners []string) error {
	owners = slices.Clone(owners)
	// The request belongs to the call: its first owner, or the call
	// itself (an owner "CALL" maps to the call too).
	owner := call
	if len(owners) > 0 {
		owner = owners[0]
	}
	_, err := s.send(ctx, opLAbandon, owner, fmt.Sprint(call, owners), true, func(now time.Time) lockRes {
		return s.p.w.execLockAbandon(now, call, owners, s.fair, s.grants, s.channel, s.ttl)
	})
	if err != nil {
		return fmt.Errorf("abandon: %w", err)
	}
	return nil
}

// rec returns the checker's record of field, under w.mu.
func (lw *lockWorld) rec(field string) *leaseRec {
	r := lw.tracks[field]
	if r == nil {
		var t uint64
		fmt.Sscanf(field, "%d", &t)
		r = &leaseRec{field: field, term: t, proc: -1}
		lw.tracks[field] = r
	}
	return r
}

// affected says why term r is out of the model (a data loss or failover
// after its mint: without MinReplicas the lock takes no WAIT, so any
// failover may lose it), or "". Under MinReplicas every hold was
// acknowledged by the replica (acquire and renewal wait): a failover is
// in the model.
func (lw *lockWorld) affected(r *leaseRec) string {
	for i, l := range lw.losses {
		if lw.cfg.MinReplicas > 0 && lw.lossWhy[i] == "failover" {
			continue
		}
		if !l.Before(r.minted) {
			return lw.lossWhy[i]
		}
	}
	return ""
}

// mintedTerm is called by the acquire script for a new term: L2 on the
// server (terms never repeat or go back, data loss included).
func (lw *lockWorld) mintedTerm(now time.Time, term uint64, owner string) {
	r := lw.rec(fmt.Sprintf("%d %s", term, owner))
	r.minted = now
	if term <= lw.lastMint {
		lw.w.violate(InvLockTerms, fmt.Sprintf("the server minted term %d after term %d", term, lw.lastMint))
	}
	lw.lastMint = max(lw.lastMint, term)
}

// serverCount is L4 when a re-entry or a non-last release leaves count
// holds of field on the server: never fewer than the holds handed out and
// not unlocked, unless a release of one hold of field ran twice (the
// count is advisory: lockStore.Release).
func (lw *lockWorld) serverCount(field string, count int64) {
	r := lw.rec(field)
	if count < int64(r.app) && lw.affected(r) == "" && !lw.twice[field] {
		lw.w.violate(InvLockCount, fmt.Sprintf("the server counts %d holds of %q while %d are held", count, field, r.app))
	}
}

// deleting is L4 when a release deletes field's hash.
func (lw *lockWorld) deleting(field string, last bool) {
	r := lw.rec(field)
	r.deleted = true
	if r.app > 0 && lw.affected(r) == "" {
		how := "the count reached zero"
		if last {
			how = "a last-hold release"
		}
		if lw.connModel && last && r.ctx != nil && r.ctx.Err() == nil {
			// A release of this very field while its hold is live: the
			// stale release of an earlier, late-confirmed attempt.
			lw.w.violate(InvLockCount, fmt.Sprintf("%q deleted by %s while %d of its holds are not unlocked (and live)", field, how, r.app), LabelStaleRelease)
			lw.finding(LabelStaleRelease)
			return
		}
		lw.w.violate(InvLockCount, fmt.Sprintf("%q deleted by %s while %d of its holds are not unlocked", field, how, r.app))
	}
}

// abandoning is L4 when abandon deletes field's hash: only a term nobody
// was handed, or one whose holds all ended (a call's adopted owner,
// abandoned when its hold's term is over), may be abandoned.
func (lw *lockWorld) abandoning(field string) {
	r := lw.rec(field)
	r.deleted = true
	if r.started && r.ctx.Err() == nil && lw.affected(r) == "" {
		lw.w.violate(InvLockCount, fmt.Sprintf("%q abandoned while its hold is live (%d holds not unlocked)", field, r.app))
	}
}

// fault records a data loss or failover and drops the pub/sub
// connections.
func (lw *lockWorld) fault(now time.Time, reason string) {
	lw.losses = append(lw.losses, now)
	lw.lossWhy = append(lw.lossWhy, reason)
	for _, r := range lw.tracks {
		if r.started && r.cancelAt.IsZero() {
			lw.w.outOfModel("lock " + reason + " while held")
		}
	}
	if lw.fair != nil && reason == "data loss" {
		lw.fair = newFairTrack()
	}
	lw.w.dropConns(now)
}
