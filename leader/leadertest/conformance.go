package leadertest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/solo-run/solo/leader"
)

// TestStore checks that the stores newStore returns keep the contract of
// leader.Store, as testing/fstest.TestFS does for a file system: one
// parallel subtest per rule, each failure naming the rule broken. newStore
// returns a store on a fresh, empty election, once per subtest. The
// optional interfaces (Proclaimer, Withdrawer, Checkpointer) are checked
// when implemented; a slow machine slows the suite but does not fail it.
func TestStore(t *testing.T, newStore func(t *testing.T) leader.Store) {
	t.Helper()
	for _, c := range storeChecks {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.check(&storeTest{t: t, ctx: t.Context(), s: newStore(t)})
		})
	}
}

// store is the interface under test.
type store = leader.Store

var storeChecks = []struct {
	name  string
	check func(*storeTest)
}{
	{"AcquireFreeMintsTerm", checkAcquireFree},
	{"TermsGrowAcrossReleases", checkTermsGrow},
	{"ExpiryFreesAndTermsGrow", checkExpiry},
	{"AcquireWhileHeldReportsHolder", checkAcquireWhileHeld},
	{"ConcurrentAcquiresOneWinner", checkOneWinner},
	{"ReacquireBySameIDAdopts", checkAdopt},
	{"RenewOnlyTheExactLease", checkRenew},
	{"ReleaseOnlyTheExactLease", checkRelease},
	{"WatchDeliversNotices", checkWatch},
	{"WatchCloseClosesEvents", checkWatchClose},
	{"InspectListsCandidates", checkCandidates},
	{"ProclaimOnlyByHolder", checkProclaim},
	{"CheckpointOnlyAdvancesUnderLease", checkCheckpoint},
}

const (
	// longTTL is a lease no check outlives.
	longTTL = time.Minute
	// midTTL is a lease no check outlives, shorter than longTTL so that a
	// renewal or adoption to longTTL shows in the time left.
	midTTL = 10 * time.Second
	// shortTTL is a lease a check waits out.
	shortTTL = 100 * time.Millisecond
	// patience bounds what a store does in the background: expiry, notices.
	patience = 15 * time.Second
)

// storeTest is one subtest's store and the helpers that check it.
type storeTest struct {
	t   *testing.T
	ctx context.Context
	s   store
}

// noErr fails the subtest when err is not nil.
func (st *storeTest) noErr(err error, what string) {
	st.t.Helper()
	if err != nil {
		st.t.Fatalf("%s: %v", what, err)
	}
}

// wantErr fails the subtest when err does not wrap target; rule says why
// the contract wants target.
func (st *storeTest) wantErr(err, target error, what, rule string) {
	st.t.Helper()
	if !errors.Is(err, target) {
		st.t.Fatalf("%s = %v, want %v: %s", what, err, target, rule)
	}
}

// acquire calls Acquire and fails unless it answers want.
func (st *storeTest) acquire(id string, ttl time.Duration, want leader.Outcome, what string) leader.Record {
	st.t.Helper()
	out, rec, err := st.s.Acquire(st.ctx, id, ttl)
	st.noErr(err, what)
	if out != want {
		st.t.Fatalf("%s by %q = %v (lease %q), want %v", what, id, out, rec.Lease, want)
	}
	return rec
}

// release calls Release and fails on an error.
func (st *storeTest) release(l leader.Lease, what string) {
	st.t.Helper()
	st.noErr(st.s.Release(st.ctx, l), what+": Release of the holder's exact lease")
}

// mustHold fails unless Inspect reports l as the holder with a time left
// in (0, ttl]; it returns the Record.
func (st *storeTest) mustHold(l leader.Lease, ttl time.Duration, what string) leader.Record {
	st.t.Helper()
	rec, err := st.s.Inspect(st.ctx)
	st.noErr(err, "Inspect "+what+", want the holder "+l.String())
	if rec.Lease != l {
		st.t.Fatalf("Inspect %s reports the lease %q, want %q", what, rec.Lease, l)
	}
	if rec.TTLLeft <= 0 || rec.TTLLeft > ttl {
		st.t.Fatalf("Inspect %s reports %s left on the lease, want the holder's time left in (0, %s]", what, rec.TTLLeft, ttl)
	}
	return rec
}

// mustBeFree fails unless Inspect answers ErrNoLeader with no lease.
func (st *storeTest) mustBeFree(what string) leader.Record {
	st.t.Helper()
	rec, err := st.s.Inspect(st.ctx)
	st.wantErr(err, leader.ErrNoLeader, "Inspect "+what, "nobody holds the lease")
	if rec.Lease != (leader.Lease{}) || rec.TTLLeft != 0 {
		st.t.Fatalf("Inspect %s answered ErrNoLeader with the lease %q (%s left), want only the candidates", what, rec.Lease, rec.TTLLeft)
	}
	return rec
}

// waitFree polls Inspect until the lease l, taken with a short TTL, has
// expired.
func (st *storeTest) waitFree(l leader.Lease, ttl time.Duration) {
	st.t.Helper()
	deadline := time.Now().Add(patience)
	for {
		_, err := st.s.Inspect(st.ctx)
		if errors.Is(err, leader.ErrNoLeader) {
			return
		}
		st.noErr(err, "Inspect while waiting for a lease to expire")
		if time.Now().After(deadline) {
			st.t.Fatalf("the lease %q taken with a TTL of %s was still held %s later: the store does not expire leases", l, ttl, patience)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// checkInfo checks the Info a store keeps (zero fields are unknown) of a
// lease just acquired or adopted with ttl.
func (st *storeTest) checkInfo(rec leader.Record, ttl time.Duration, what string) {
	st.t.Helper()
	if rec.LeaseTTL != 0 && rec.LeaseTTL != ttl {
		st.t.Fatalf("Inspect %s: LeaseTTL %s, want the TTL the holder took the lease with, %s", what, rec.LeaseTTL, ttl)
	}
	if s := rec.Since; !s.IsZero() && (s.After(time.Now().Add(time.Minute)) || s.Before(time.Now().Add(-time.Minute))) {
		st.t.Fatalf("Inspect %s: Since %s, want the time of the acquire (now)", what, s)
	}
}

func checkAcquireFree(st *storeTest) {
	if rec := st.mustBeFree("on a fresh election"); len(rec.Candidates) != 0 {
		st.t.Fatalf("Inspect on a fresh election lists candidates %q, want none", rec.Candidates)
	}
	rec := st.acquire("a", longTTL, leader.Acquired, "Acquire of a free lease")
	if rec.ID != "a" || rec.Term == 0 {
		st.t.Fatalf("Acquire of a free lease by %q returned the lease %q, want a new nonzero term held by %q", "a", rec.Lease, "a")
	}
	if rec.TTLLeft <= 0 || rec.TTLLeft > longTTL {
		st.t.Fatalf("Acquire of a free lease returned %s left, want (0, %s]", rec.TTLLeft, longTTL)
	}
	got := st.mustHold(rec.Lease, longTTL, "after an Acquire")
	st.checkInfo(got, longTTL, "after an Acquire")
}

func checkTermsGrow(st *storeTest) {
	var last uint64
	for i, id := range []string{"a", "a", "b", "a", "c", "c", "b", "a"} {
		what := fmt.Sprintf("Acquire %d, after a release", i)
		rec := st.acquire(id, longTTL, leader.Acquired, what)
		if rec.Term <= last || rec.ID != id {
			st.t.Fatalf("%s by %q minted the lease %q, want the ID %q and a term above the last one, %d: terms only grow", what, id, rec.Lease, id, last)
		}
		last = rec.Term
		st.release(rec.Lease, what)
	}
}

func checkExpiry(st *storeTest) {
	old := st.acquire("a", shortTTL, leader.Acquired, "Acquire with a short TTL")
	st.waitFree(old.Lease, shortTTL)
	st.wantErr(st.s.Renew(st.ctx, old.Lease, longTTL), leader.ErrLeaseLost,
		"Renew of an expired lease", "a renew never re-creates a missing lease")
	st.mustBeFree("after a Renew of an expired lease (a renew must never re-create a missing lease)")
	st.wantErr(st.s.Release(st.ctx, old.Lease), leader.ErrLeaseLost,
		"Release of an expired lease", "only the exact current lease is released")
	if p, ok := st.s.(leader.Proclaimer); ok {
		st.wantErr(p.Proclaim(st.ctx, old.Lease, "v"), leader.ErrLeaseLost,
			"Proclaim under an expired lease", "only the holder proclaims")
	}
	if c, ok := st.s.(leader.Checkpointer); ok {
		st.wantErr(c.Checkpoint(st.ctx, old.Lease, "k", 1), leader.ErrLeaseLost,
			"Checkpoint under an expired lease", "a checkpoint is recorded only under the lease")
	}
	st.mustBeFree("after calls under an expired lease")
	b := st.acquire("b", shortTTL, leader.Acquired, "Acquire after the holder's lease expired")
	if b.Term <= old.Term {
		st.t.Fatalf("Acquire after the lease %q expired minted %q: terms only grow, also across an expiry", old.Lease, b.Lease)
	}
	st.waitFree(b.Lease, shortTTL)
	a := st.acquire("a", longTTL, leader.Acquired, "Acquire by an ID whose earlier lease expired (a new term, not an adoption)")
	if a.Term <= b.Term {
		st.t.Fatalf("Acquire after the lease %q expired minted %q: terms only grow, also across an expiry", b.Lease, a.Lease)
	}
}

func checkAcquireWhileHeld(st *storeTest) {
	a := st.acquire("a", midTTL, leader.Acquired, "Acquire of a free lease")
	out, rec, err := st.s.Acquire(st.ctx, "b", longTTL)
	st.noErr(err, "Acquire by b while a holds the lease")
	if out != leader.Held {
		st.t.Fatalf("Acquire by b while a holds the lease = %v (lease %q), want held: a held lease is never taken", out, rec.Lease)
	}
	if rec.Lease != a.Lease || rec.TTLLeft <= 0 || rec.TTLLeft > midTTL {
		st.t.Fatalf("Acquire by b while a holds the lease reported %q with %s left, want the holder %q and its time left in (0, %s]",
			rec.Lease, rec.TTLLeft, a.Lease, midTTL)
	}
	st.mustHold(a.Lease, midTTL, "after another candidate's Acquire (it must leave the holder's lease and TTL alone)")
	st.noErr(st.s.Renew(st.ctx, a.Lease, midTTL), "Renew by the holder after another candidate's Acquire")
}

func checkOneWinner(st *storeTest) {
	type result struct {
		out leader.Outcome
		rec leader.Record
		err error
	}
	res := make([]result, 8)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range res {
		wg.Go(func() {
			<-start
			out, rec, err := st.s.Acquire(st.ctx, fmt.Sprintf("c%d", i), longTTL)
			res[i] = result{out, rec, err}
		})
	}
	close(start)
	wg.Wait()
	var won []leader.Lease
	for i, r := range res {
		st.noErr(r.err, fmt.Sprintf("concurrent Acquire by c%d", i))
		if r.out == leader.Acquired {
			won = append(won, r.rec.Lease)
		}
	}
	if len(won) != 1 {
		st.t.Fatalf("%d concurrent Acquires of a free lease: %d acquired it (%q), want exactly one", len(res), len(won), won)
	}
	for i, r := range res {
		if r.out != leader.Acquired && (r.out != leader.Held || r.rec.Lease != won[0]) {
			st.t.Fatalf("concurrent Acquire by c%d = %v with the holder %q, want held by the one winner %q", i, r.out, r.rec.Lease, won[0])
		}
	}
	st.mustHold(won[0], longTTL, "after concurrent Acquires")
}

func checkAdopt(st *storeTest) {
	a := st.acquire("a", midTTL, leader.Acquired, "Acquire of a free lease")
	before := st.mustHold(a.Lease, midTTL, "after an Acquire")
	rec := st.acquire("a", longTTL, leader.Adopted, "Acquire by the holder's own ID (a retry after a lost reply must adopt)")
	if rec.Lease != a.Lease {
		st.t.Fatalf("an adopting Acquire returned the lease %q, want the one held, %q: adoption keeps the term", rec.Lease, a.Lease)
	}
	if rec.TTLLeft <= midTTL || rec.TTLLeft > longTTL {
		st.t.Fatalf("an adopting Acquire with a TTL of %s returned %s left, want the lease refreshed to the new TTL", longTTL, rec.TTLLeft)
	}
	got := st.mustHold(a.Lease, longTTL, "after an adopting Acquire")
	if got.TTLLeft <= midTTL {
		st.t.Fatalf("Inspect after an adopting Acquire with a TTL of %s reports %s left: the lease was not refreshed", longTTL, got.TTLLeft)
	}
	st.checkInfo(got, longTTL, "after an adopting Acquire")
	if s := before.Since; !s.IsZero() && !got.Since.Equal(s) {
		st.t.Fatalf("an adopting Acquire moved Since from %s to %s: it is when the lease was acquired", s, got.Since)
	}
}

func checkRenew(st *storeTest) {
	a := st.acquire("a", midTTL, leader.Acquired, "Acquire of a free lease")
	for _, l := range []leader.Lease{{Term: a.Term + 1, ID: "a"}, {Term: a.Term - 1, ID: "a"}, {Term: a.Term, ID: "b"}} {
		st.wantErr(st.s.Renew(st.ctx, l, longTTL), leader.ErrLeaseLost,
			fmt.Sprintf("Renew of %q while %q holds the lease", l, a.Lease), "only the exact lease is renewed")
	}
	st.mustHold(a.Lease, midTTL, "after Renews of other leases (they must not extend the holder's)")
	st.noErr(st.s.Renew(st.ctx, a.Lease, longTTL), "Renew of the holder's exact lease")
	if got := st.mustHold(a.Lease, longTTL, "after a Renew"); got.TTLLeft <= midTTL {
		st.t.Fatalf("Renew to %s of a lease with %s left: Inspect reports %s left, want it extended", longTTL, midTTL, got.TTLLeft)
	}
	st.release(a.Lease, "before renewing a released lease")
	st.wantErr(st.s.Renew(st.ctx, a.Lease, longTTL), leader.ErrLeaseLost,
		"Renew of a released lease", "a renew never re-creates a missing lease")
	st.mustBeFree("after a Renew of a released lease (a renew must never re-create a missing lease)")
	st.wantErr(st.s.Renew(st.ctx, leader.Lease{Term: a.Term + 1000, ID: "z"}, longTTL), leader.ErrLeaseLost,
		"Renew of a lease never acquired", "a renew never creates a lease")
	st.mustBeFree("after a Renew of a lease never acquired (a renew must never create a lease)")
}

func checkRelease(st *storeTest) {
	a := st.acquire("a", longTTL, leader.Acquired, "Acquire of a free lease")
	for _, l := range []leader.Lease{{Term: a.Term + 1, ID: "a"}, {Term: a.Term - 1, ID: "a"}, {Term: a.Term, ID: "b"}} {
		st.wantErr(st.s.Release(st.ctx, l), leader.ErrLeaseLost,
			fmt.Sprintf("Release of %q while %q holds the lease", l, a.Lease), "only the exact lease is released")
	}
	st.mustHold(a.Lease, longTTL, "after Releases of other leases (they must leave the holder's alone)")
	st.release(a.Lease, "a free election")
	st.mustBeFree("after the holder's Release")
	b := st.acquire("b", longTTL, leader.Acquired, "Acquire after a Release")
	if b.Term <= a.Term {
		st.t.Fatalf("Acquire after the release of %q minted %q: terms only grow", a.Lease, b.Lease)
	}
	// The same Release again may answer nil or ErrLeaseLost: RedisStore
	// answers a repeated release of the lease it just released as the
	// first (go-redis re-sends a script whose connection broke), the fake
	// refuses it. Either way it must leave the next lease alone.
	if err := st.s.Release(st.ctx, a.Lease); err != nil && !errors.Is(err, leader.ErrLeaseLost) {
		st.t.Fatalf("Release of %q again, under the next lease %q: %v", a.Lease, b.Lease, err)
	}
	st.mustHold(b.Lease, longTTL, "after a repeated Release of the previous lease (it must leave the next lease alone)")
}

// watch opens a Watch, waits until it is live, and closes it when the
// subtest ends.
func (st *storeTest) watch() leader.Watch {
	st.t.Helper()
	w, err := st.s.Watch(st.ctx)
	st.noErr(err, "Watch")
	st.t.Cleanup(func() { _ = w.Close() })
	deadline := time.Now().Add(patience)
	for !w.Live() {
		if time.Now().After(deadline) {
			st.t.Fatalf("a Watch was not Live %s after it opened", patience)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return w
}

// next fails unless the next notice w delivers is want.
func (st *storeTest) next(w leader.Watch, want leader.Event, after string) {
	st.t.Helper()
	timer := time.NewTimer(patience)
	defer timer.Stop()
	select {
	case ev, ok := <-w.Events():
		if !ok {
			st.t.Fatalf("a Watch's Events closed while it was open, after %s", after)
		}
		if ev != want {
			st.t.Fatalf("the notice after %s was %q, want %q", after, eventString(ev), eventString(want))
		}
	case <-timer.C:
		st.t.Fatalf("no notice within %s after %s, want %q", patience, after, eventString(want))
	}
}

// eventString names an event for a failure message.
func eventString(ev leader.Event) string {
	switch ev.Kind {
	case leader.EventElected:
		return "elected " + ev.Lease.String()
	case leader.EventReleased:
		return "released " + ev.Lease.String()
	case leader.EventResign:
		return fmt.Sprint("resign ", ev.Lease.Term)
	}
	return fmt.Sprintf("kind %d %s", ev.Kind, ev.Lease)
}

func checkWatch(st *storeTest) {
	n, err := st.s.RequestResign(st.ctx, 1)
	st.noErr(err, "RequestResign with no watcher")
	if n != 0 {
		st.t.Fatalf("RequestResign on an election nobody watches reports %d receivers, want 0", n)
	}
	w := st.watch()
	a := st.acquire("a", midTTL, leader.Acquired, "Acquire of a free lease")
	st.next(w, leader.Event{Kind: leader.EventElected, Lease: a.Lease}, "an Acquire of a free lease")
	// Neither an adoption, a renewal nor a refused release is announced:
	// the notice after them is the release's.
	st.acquire("a", midTTL, leader.Adopted, "Acquire by the holder's own ID")
	st.noErr(st.s.Renew(st.ctx, a.Lease, midTTL), "Renew of the holder's exact lease")
	st.wantErr(st.s.Release(st.ctx, leader.Lease{Term: a.Term, ID: "b"}), leader.ErrLeaseLost,
		"Release of another ID's lease", "only the exact lease is released")
	st.release(a.Lease, "a watched election")
	st.next(w, leader.Event{Kind: leader.EventReleased, Lease: a.Lease},
		"an adoption, a renewal, a refused release (none announced) and a release")
	n, err = st.s.RequestResign(st.ctx, a.Term)
	st.noErr(err, "RequestResign with a live watcher")
	if n < 1 {
		st.t.Fatalf("RequestResign with a live Watch reports %d receivers, want at least 1", n)
	}
	st.next(w, leader.Event{Kind: leader.EventResign, Lease: leader.Lease{Term: a.Term}}, "a RequestResign")
}

func checkWatchClose(st *storeTest) {
	w := st.watch()
	st.acquire("a", midTTL, leader.Acquired, "Acquire of a free lease") // a notice possibly pending at Close
	st.noErr(w.Close(), "Watch.Close")
	timer := time.NewTimer(patience)
	defer timer.Stop()
	for {
		select {
		case _, ok := <-w.Events():
			if !ok {
				return
			}
		case <-timer.C:
			st.t.Fatalf("a Watch's Events was not closed %s after Close", patience)
		}
	}
}

func checkCandidates(st *storeTest) {
	wd, ok := st.s.(leader.Withdrawer)
	if !ok {
		st.t.Skip("the store does not implement leader.Withdrawer: it records no candidates")
	}
	a := st.acquire("a", midTTL, leader.Acquired, "Acquire of a free lease")
	st.acquire("c", midTTL, leader.Held, "Acquire while the lease is held")
	// Renewed, the holder's lease outlives c's wait: b, waiting after the
	// renewal, is listed until later than c.
	st.noErr(st.s.Renew(st.ctx, a.Lease, longTTL), "Renew of the holder's exact lease")
	st.acquire("b", midTTL, leader.Held, "Acquire while the lease is held")
	if rec := st.mustHold(a.Lease, longTTL, "with candidates waiting"); !slices.Equal(rec.Candidates, []string{"c", "b"}) {
		st.t.Fatalf("Inspect lists the candidates %q, want [c b]: those that found the lease held, soonest gone first, never the holder", rec.Candidates)
	}
	st.noErr(wd.Withdraw(st.ctx, "c"), "Withdraw of a candidate")
	if rec := st.mustHold(a.Lease, longTTL, "after a Withdraw"); !slices.Equal(rec.Candidates, []string{"b"}) {
		st.t.Fatalf("Inspect after Withdraw(c) lists the candidates %q, want [b]: Withdraw removes a candidate", rec.Candidates)
	}
	st.release(a.Lease, "an election with a candidate")
	if rec := st.mustBeFree("after the holder's Release"); !slices.Equal(rec.Candidates, []string{"b"}) {
		st.t.Fatalf("Inspect answering ErrNoLeader lists the candidates %q, want [b]: the Record carries the candidates", rec.Candidates)
	}
	b := st.acquire("b", midTTL, leader.Acquired, "Acquire by a waiting candidate")
	if rec := st.mustHold(b.Lease, midTTL, "after a candidate acquired"); len(rec.Candidates) != 0 {
		st.t.Fatalf("Inspect lists the candidates %q after b acquired, want none: a holder is not a candidate", rec.Candidates)
	}
}

func checkProclaim(st *storeTest) {
	p, ok := st.s.(leader.Proclaimer)
	if !ok {
		st.t.Skip("the store does not implement leader.Proclaimer")
	}
	a := st.acquire("a", longTTL, leader.Acquired, "Acquire of a free lease")
	st.noErr(p.Proclaim(st.ctx, a.Lease, "addr-1"), "Proclaim by the holder")
	if rec := st.mustHold(a.Lease, longTTL, "after a Proclaim"); rec.Value != "addr-1" {
		st.t.Fatalf("Inspect after the holder proclaimed %q reports Value %q", "addr-1", rec.Value)
	}
	for _, l := range []leader.Lease{{Term: a.Term + 1, ID: "a"}, {Term: a.Term, ID: "b"}} {
		st.wantErr(p.Proclaim(st.ctx, l, "addr-2"), leader.ErrLeaseLost,
			fmt.Sprintf("Proclaim under %q while %q holds the lease", l, a.Lease), "only the holder proclaims")
	}
	if rec := st.mustHold(a.Lease, longTTL, "after refused Proclaims"); rec.Value != "addr-1" {
		st.t.Fatalf("Inspect reports Value %q after Proclaims under other leases, want the holder's %q: only the holder proclaims", rec.Value, "addr-1")
	}
	st.release(a.Lease, "a proclaimed lease")
	b := st.acquire("b", longTTL, leader.Acquired, "Acquire after a Release")
	if rec := st.mustHold(b.Lease, longTTL, "after a new Acquire"); rec.Value != "addr-2" {
		st.t.Fatalf("the next lease proclaims %q, want %q, the value last given to Proclaim: it is kept for leases taken later", rec.Value, "addr-2")
	}
}

// loaded fails unless LoadCheckpoint of key answers want.
func (st *storeTest) loaded(c leader.Checkpointer, key string, want int64, what string) {
	st.t.Helper()
	n, ok, err := c.LoadCheckpoint(st.ctx, key)
	st.noErr(err, "LoadCheckpoint "+what)
	if !ok || n != want {
		st.t.Fatalf("LoadCheckpoint(%q) %s = %d, %v, want %d recorded", key, what, n, ok, want)
	}
}

func checkCheckpoint(st *storeTest) {
	c, ok := st.s.(leader.Checkpointer)
	if !ok {
		st.t.Skip("the store does not implement leader.Checkpointer")
	}
	if n, ok, err := c.LoadCheckpoint(st.ctx, "jobs"); err != nil || ok {
		st.t.Fatalf("LoadCheckpoint of a key never recorded = %d, %v, %v, want ok false", n, ok, err)
	}
	a := st.acquire("a", longTTL, leader.Acquired, "Acquire of a free lease")
	st.noErr(c.Checkpoint(st.ctx, a.Lease, "jobs", 5), "Checkpoint by the holder")
	st.loaded(c, "jobs", 5, "after a Checkpoint")
	for _, n := range []int64{5, 4} {
		st.wantErr(c.Checkpoint(st.ctx, a.Lease, "jobs", n), leader.ErrCheckpointNotAdvanced,
			fmt.Sprintf("Checkpoint of %d over 5", n), "a checkpoint only advances")
	}
	for _, l := range []leader.Lease{{Term: a.Term + 1, ID: "a"}, {Term: a.Term, ID: "b"}} {
		st.wantErr(c.Checkpoint(st.ctx, l, "jobs", 9), leader.ErrLeaseLost,
			fmt.Sprintf("Checkpoint under %q while %q holds the lease", l, a.Lease), "a checkpoint is recorded only under the lease")
	}
	st.loaded(c, "jobs", 5, "after refused Checkpoints")
	// Values above 2^53 are compared exactly, not as floating point.
	const big = int64(1) << 62
	st.noErr(c.Checkpoint(st.ctx, a.Lease, "big", big), "Checkpoint of 2^62")
	st.noErr(c.Checkpoint(st.ctx, a.Lease, "big", big+1), "Checkpoint of 2^62+1 over 2^62 (compared exactly, it advances)")
	st.wantErr(c.Checkpoint(st.ctx, a.Lease, "big", big), leader.ErrCheckpointNotAdvanced,
		"Checkpoint of 2^62 over 2^62+1", "a checkpoint only advances, compared exactly")
	st.loaded(c, "big", big+1, "after Checkpoints above 2^53")
	st.release(a.Lease, "a lease with checkpoints")
	st.wantErr(c.Checkpoint(st.ctx, a.Lease, "jobs", 9), leader.ErrLeaseLost,
		"Checkpoint under a released lease", "a checkpoint is recorded only under the lease")
	st.loaded(c, "jobs", 5, "after the lease was released (checkpoints outlive the lease)")
	b := st.acquire("b", longTTL, leader.Acquired, "Acquire after a Release")
	st.wantErr(c.Checkpoint(st.ctx, b.Lease, "jobs", 5), leader.ErrCheckpointNotAdvanced,
		"Checkpoint of 5 by the next term over 5", "a checkpoint only advances, across terms")
	st.noErr(c.Checkpoint(st.ctx, b.Lease, "jobs", 6), "Checkpoint of 6 by the next term over 5")
	st.loaded(c, "jobs", 6, "after the next term's Checkpoint")
}
