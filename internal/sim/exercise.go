package sim

import (
	"strings"
	"time"
)

// Preconditions of the invariants that only rare schedules meet: each is
// counted (Stats.Exercised) when a schedule creates the situation in which
// a broken script or client would break an invariant, whether or not it
// did. The CI profile reports in how many schedules each could have been
// violated, and the plan is weighted (NewPlan) so that each happens in a
// good share of them.
const (
	// ExReleaseNotOurs: release.lua ran for a lease other than the
	// server's live one (a late release): without the owner check it
	// deletes another candidate's lease (invariants 1, 2).
	ExReleaseNotOurs = "release of a lease not the server's (1, 2: release's owner check)"
	// ExTermLost: acquire.lua minted a term with the term key absent or
	// below the highest term minted (a data loss or failover lost it):
	// without the clock floor the term repeats (invariants 4, 10).
	ExTermLost = "acquire after the term key was lost (4, 10: the term's clock floor)"
	// ExCheckpointLost: a failover under MinReplicas lost a recorded
	// checkpoint that had not reached the replica: without the WAIT after
	// it a tick fires twice (invariant 5).
	ExCheckpointLost = "failover losing an unreplicated checkpoint under min_replicas (5: checkpoint's WAIT)"
	// ExLeaseFault: a data loss or failover while a lease was live
	// (invariants 1, 2, 4).
	ExLeaseFault = "data loss or failover while a lease was live (1, 2, 4)"
	// ExLeaseEvicted: the server evicted the lease key under memory
	// pressure (maxmemory with a volatile-* or allkeys-* policy): a
	// candidate that campaigns under such a policy leaves two leaders
	// (invariants 1, 2).
	ExLeaseEvicted = "lease evicted under maxmemory (1, 2: refuse an evicting policy)"
	// ExLockRenewNotOurs: the lock's renew.lua ran for a hold other than
	// the server's live one: without the owner check it extends another
	// holder's lock, and a lost hold lives on (L1, L3).
	ExLockRenewNotOurs = "lock renew of a hold not the server's (L1, L3: renew's owner check)"
	// ExLockFault: a data loss or failover while the lock was held (L1,
	// L2).
	ExLockFault = "data loss or failover while the lock was held (L1, L2)"
)

// exercised records precondition what, under w.mu.
func (w *world) exercised(what string) {
	if w.stats.Exercised == nil {
		w.stats.Exercised = map[string]int{}
	}
	if w.stats.Exercised[what] == 0 {
		w.event(-1, evNote, 0, 0, 0, 0, "exercised: "+what)
	}
	w.stats.Exercised[what]++
}

// preScript records the preconditions a script is about to meet, from the
// primary's state before it runs.
func (w *world) preScript(now time.Time, sc *script, keys, argv []string) {
	if w.onOld {
		return // the checker judges the new master
	}
	switch sc.name {
	case "leader/release.lua":
		if cur := w.leaseNow(now); cur != "" && len(argv) > 0 && cur != argv[0] {
			w.exercised(ExReleaseNotOurs)
		}
	case "leader/acquire.lua":
		if w.leaseNow(now) != "" || w.maxMinted == 0 {
			return
		}
		stored, _ := parseUint(w.readString(now, w.p.Cfg.TermKey()))
		if stored < w.maxMinted {
			w.exercised(ExTermLost)
		}
	case "leader/lock/renew.lua":
		if cur := w.lockNow(now); cur != "" && len(argv) > 0 && cur != argv[0] {
			w.exercised(ExLockRenewNotOurs)
		}
	}
}

// preFault records the preconditions a data loss or failover meets, with
// lost the replication writes it loses.
func (w *world) preFault(now time.Time, lost []repWrite) {
	if w.leaseNow(now) != "" {
		w.exercised(ExLeaseFault)
	}
	if w.lk != nil && w.lockNow(now) != "" {
		w.exercised(ExLockFault)
	}
	if w.p.Cfg.MinReplicas == 0 {
		return
	}
	cp := w.p.Cfg.Key("") + "cp:"
	for _, wr := range lost {
		for _, k := range wr.keys {
			if strings.HasPrefix(k.key, cp) {
				w.exercised(ExCheckpointLost)
				return
			}
		}
	}
}

func parseUint(s string) (uint64, bool) {
	var n uint64
	if s == "" {
		return 0, false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
		n = n*10 + uint64(s[i]-'0')
	}
	return n, true
}
