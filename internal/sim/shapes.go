package sim

import (
	"cmp"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// This file holds the server's side of the plan's shapes (Plan.Memory,
// Plan.Evictions, Plan.Promote): what `INFO memory` answers, evictions
// under memory pressure, and the old master that clients go on talking to
// for a while after a failover.

// info answers INFO: the memory section's maxmemory and maxmemory_policy
// lines, as Redis prints them (CRLF, "# Memory" heading).
func (w *world) info(args []string) any {
	if len(args) > 2 {
		return errSyntax
	}
	if len(args) == 2 && !strings.EqualFold(args[1], "memory") && !strings.EqualFold(args[1], "all") && !strings.EqualFold(args[1], "default") {
		return "" // another section: nothing the simulator keeps
	}
	m := w.p.Memory
	pol := cmp.Or(m.Policy, "noeviction")
	return fmt.Sprintf("# Memory\r\nused_memory:1048576\r\nmaxmemory:%d\r\nmaxmemory_policy:%s\r\n", m.Max, pol)
}

// configGet answers CONFIG GET for maxmemory and maxmemory-policy (the
// other parameter a client might read to check the policy): the
// parameter-value pairs that match, as Redis replies. Other subcommands
// are refused, as a managed Redis that renames CONFIG refuses them.
func (w *world) configGet(args []string) any {
	if len(args) < 3 || !strings.EqualFold(args[1], "GET") {
		return redisError("ERR unknown command 'CONFIG', with args beginning with: " + strings.Join(args[1:], " "))
	}
	m := w.p.Memory
	pol := cmp.Or(m.Policy, "noeviction")
	var out []any
	for _, name := range args[2:] {
		switch strings.ToLower(name) {
		case "maxmemory":
			out = append(out, "maxmemory", strconv.FormatInt(m.Max, 10))
		case "maxmemory-policy":
			out = append(out, "maxmemory-policy", pol)
		}
	}
	return out
}

// evict drops what memory pressure makes the server drop at fake time now:
// one to three keys its policy allows (any key for allkeys-*, one with a
// TTL for volatile-*), drawn by the plan's stream; the replica deletes
// them too (Redis propagates an eviction as a DEL).
func (w *world) evict(now time.Time, n uint64) {
	srv := w.srvNs(now)
	var keys []string
	for k, e := range w.prim.ks.m {
		if (e.exp == 0 || srv < e.exp) && (strings.HasPrefix(w.p.Memory.Policy, "allkeys") || e.exp != 0) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	r := keyed(w.p.Seed, uint64(opEvict), n)
	var gone []string
	wr := repWrite{}
	for range 1 + r.intn(3) {
		if len(keys) == 0 {
			break
		}
		i := r.intn(len(keys))
		k := keys[i]
		keys = append(keys[:i], keys[i+1:]...)
		if k == w.p.Cfg.LeaseKey() {
			w.exercised(ExLeaseEvicted)
		}
		w.prim.ks.set(k, nil)
		wr.keys = append(wr.keys, keySnap{key: k})
		gone = append(gone, k)
	}
	if len(wr.keys) > 0 {
		w.replicate(now, wr)
	}
	w.evictions = append(w.evictions, now)
	w.event(-1, evFault, 0, 0, 0, 0, fmt.Sprintf("EVICTION (maxmemory-policy %s): %v", w.p.Memory.Policy, gone))
	w.lockFault(now, "eviction")
}

// keepOldMaster keeps the old master's data after a failover for
// Plan.Promote: each candidate goes on talking to it until a time drawn
// within that window (it learns of the promotion then).
func (w *world) keepOldMaster(now time.Time, old state) {
	if w.p.Promote <= 0 || len(w.cands) == 0 {
		w.old = nil
		return
	}
	w.old = &old
	w.oldUntil = make([]time.Time, len(w.cands))
	for i := range w.cands {
		r := keyed(w.p.Seed, uint64(opShape), uint64(i)+1, w.epoch)
		w.oldUntil[i] = now.Add(r.dur(0, w.p.Promote))
	}
	w.event(-1, evNote, 0, 0, 0, 0, fmt.Sprintf("clients keep talking to the old master until %v", fmtTimes(w.start, w.oldUntil)))
	if w.p.Cfg.MinReplicas == 0 {
		// Writes the old master takes meanwhile are lost as a failover's:
		// out of the model until its window ends.
		w.losses = append(w.losses, slices.MaxFunc(w.oldUntil, time.Time.Compare))
		w.lossWhy = append(w.lossWhy, "failover without min_replicas (the old master took writes)")
	}
}

// talksToOld reports whether candidate cand still talks to the old master
// at now (Plan.Promote).
func (w *world) talksToOld(cand int, now time.Time) bool {
	return w.old != nil && cand < len(w.oldUntil) && now.Before(w.oldUntil[cand])
}

// oldMasterEnd is when the last candidate stops talking to the old master
// (zero without one): the end of a fault that outlasts Plan.FaultEnd, so
// the calm phase begins after it (world.settle).
func (w *world) oldMasterEnd() time.Time {
	if w.old == nil || len(w.oldUntil) == 0 {
		return time.Time{}
	}
	return slices.MaxFunc(w.oldUntil, time.Time.Compare)
}

// onOldMaster runs fn with the old master as the primary when candidate
// cand still talks to it at now (fn then sees w.onOld), else as is.
func (w *world) onOldMaster(cand int, now time.Time, fn func()) {
	if !w.talksToOld(cand, now) {
		fn()
		return
	}
	w.prim, *w.old = *w.old, w.prim
	w.onOld = true
	defer func() {
		w.onOld = false
		w.prim, *w.old = *w.old, w.prim
	}()
	fn()
}

// postOld records what an election script did on the old master: a lease
// it granted is one the new master never saw. Without MinReplicas that is
// a failover out of the model (the function is excused, as any failover's);
// with it, the WAIT that follows fails and no function may start.
func (w *world) postOld(sc *script, r any) {
	if sc.name != "leader/acquire.lua" || w.p.Cfg.MinReplicas > 0 {
		return
	}
	if arr, ok := r.([]any); ok && len(arr) >= 2 {
		if v, ok := arr[1].(string); ok {
			if l, ok := parseLease(v); ok {
				if w.oldTerms == nil {
					w.oldTerms = map[uint64]bool{}
				}
				w.oldTerms[l.Term] = true
			}
		}
	}
}

// oldLease says whether term's lease came from the old master after a
// failover without MinReplicas.
func (w *world) oldLease(term uint64) bool { return w.oldTerms[term] }

func fmtTimes(start time.Time, ts []time.Time) string {
	parts := make([]string, len(ts))
	for i, t := range ts {
		parts[i] = fmtDur(t.Sub(start))
	}
	return "[" + strings.Join(parts, " ") + "]"
}
