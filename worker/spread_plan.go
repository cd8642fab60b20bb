package worker

import (
	"hash/fnv"
	"math"
	"sort"
	"strings"
)

// mem is a member as plan sees it.
type mem struct {
	id    string
	load  int
	jobs  map[string]bool
	held  []string
	known bool // published its jobs and holdings (not an older solo)
}

// balance is what one heartbeat's view of the group means for a member.
type balance struct {
	share, floor int             // of the jobs this member can run, its fair part
	minLoad      int             // the least load among the peers and this member
	firstMax     string          // the first (ID order) of the most loaded of them
	lowPeer      bool            // a peer two or more below its own share
	unheld       []string        // this member's jobs that nobody holds
	rescue       map[string]bool // unheld jobs this member must take (see step)
	room         map[string]bool // held jobs another capable member has room for
}

// plan computes the balance of member me, which registered the jobs mine
// and holds held, from the live members peers (me among them, or not yet).
// Only members able to run a job count toward its share: each job counts
// 1/c toward the fair load of each of the c members that registered it,
// so a member's share is ceil of its jobs' sum (ceil(N/M) when every
// member has the same N jobs), and a member that registered none of a
// job's peers' jobs is nobody's peer.
func plan(me string, mine, held []string, peers []peer) balance {
	own := setOf(mine)
	ms := mems(me, own, held, peers)
	fair, share := shares(ms)
	b := balance{share: share[0], floor: int(math.Floor(fair[0] + 1e-9)), minLoad: ms[0].load,
		rescue: map[string]bool{}, room: map[string]bool{}}
	// Peers: the members that can run some job of ours, in ID order.
	maxLoad := -1
	for _, i := range peerOrder(ms, own) {
		x := ms[i]
		b.minLoad = min(b.minLoad, x.load)
		if x.load > maxLoad {
			maxLoad, b.firstMax = x.load, x.id
		}
		if i > 0 && x.load <= share[i]-2 {
			b.lowPeer = true
		}
	}
	for _, j := range held {
		for i, x := range ms[1:] {
			if x.jobs[j] && x.load < share[i+1] {
				b.room[j] = true
				break
			}
		}
	}
	heldBy := map[string]bool{}
	for _, x := range ms {
		for _, j := range x.held {
			heldBy[j] = true
		}
	}
	for _, j := range mine {
		if heldBy[j] {
			continue
		}
		b.unheld = append(b.unheld, j)
		if rescuer(ms, share, j) == 0 {
			b.rescue[j] = true
		}
	}
	return b
}

// mems returns member me (first: its own truth is local, with the jobs
// own and held) and the other peers as plan sees them.
func mems(me string, own map[string]bool, held []string, peers []peer) []mem {
	ms := []mem{{id: me, load: len(held), jobs: own, held: held, known: true}}
	for _, p := range peers {
		if p.ID == me {
			continue
		}
		jobs := p.jobs
		if jobs == nil {
			jobs = own
		}
		ms = append(ms, mem{id: p.ID, load: p.Load, jobs: jobs, held: p.held, known: p.jobs != nil})
	}
	return ms
}

// shares returns each member's fair load (each job counts 1/c toward
// each of the c members that registered it) and its share, the ceiling.
func shares(ms []mem) (fair []float64, share []int) {
	capable := map[string]int{}
	for _, x := range ms {
		for j := range x.jobs {
			capable[j]++
		}
	}
	fair = make([]float64, len(ms))
	share = make([]int, len(ms))
	for i, x := range ms {
		for j := range x.jobs {
			fair[i] += 1 / float64(capable[j])
		}
		share[i] = int(math.Ceil(fair[i] - 1e-9))
	}
	return fair, share
}

// rescuer returns the index in ms of the member that takes the unheld
// job j beyond its share, or -1 when none must. When nobody able to run
// j has room, the least loaded of them (then the first by ID) takes it;
// not while one of them publishes no holdings (an older solo): it may
// hold j.
func rescuer(ms []mem, share []int, j string) int {
	best := -1
	for i, x := range ms {
		if !x.jobs[j] {
			continue
		}
		if x.load < share[i] || !x.known {
			return -1
		}
		if best < 0 || x.load < ms[best].load || (x.load == ms[best].load && x.id < ms[best].id) {
			best = i
		}
	}
	return best
}

// peerOrder returns the indexes of ms (0 is this member) that can run some
// job of own, this member included, in ID order.
func peerOrder(ms []mem, own map[string]bool) []int {
	var out []int
	for i, x := range ms {
		if i == 0 {
			out = append(out, i)
			continue
		}
		for j := range x.jobs {
			if own[j] {
				out = append(out, i)
				break
			}
		}
	}
	sort.Slice(out, func(a, b int) bool { return ms[out[a]].id < ms[out[b]].id })
	return out
}

func setOf(names []string) map[string]bool {
	m := make(map[string]bool, len(names))
	for _, n := range names {
		m[n] = true
	}
	return m
}

// score is the rendezvous hash of job and member: a member sheds the jobs
// it scores lowest first, so the choice is the same on every run.
func score(job, member string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(job))
	_, _ = h.Write([]byte{0})
	_, _ = h.Write([]byte(member))
	x := h.Sum64()
	// splitmix64 finaliser: fnv's low bits mix poorly.
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// MemberOf returns the member ID in a spread job's holder ID
// (MEMBER-RANDOM): the instance that runs the job.
func MemberOf(holder string) string {
	if i := strings.LastIndexByte(holder, '-'); i > 0 {
		return holder[:i]
	}
	return holder
}
