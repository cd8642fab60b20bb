package leader

import (
	"context"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/solo-run/solo/internal/batch"
)

// hubRenew is one queued renewal and, once done is closed, its answer.
type hubRenew struct {
	ctx  context.Context
	key  string
	val  string
	ttl  int64
	res  any
	err  error
	done chan struct{}
}

func (r *hubRenew) Context() context.Context { return r.ctx }

// renew queues one renew script on the queue of the node serving key and
// waits for its answer or ctx. The script's reply is the same as an
// unbatched EVALSHA's (NOSCRIPT falls back to EVAL).
func (h *Hub) renew(ctx context.Context, key, val string, ttl int64) (any, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	r := &hubRenew{ctx: ctx, key: key, val: val, ttl: ttl, done: make(chan struct{})}
	addr := h.nodeOf(ctx, key)
	h.qmu.Lock()
	if h.qclosed {
		h.qmu.Unlock()
		return nil, errHubClosed
	}
	q := h.queues[addr]
	if q == nil {
		// Made under qmu while not closed: Close sets qclosed under qmu
		// before it closes the queues.
		q = h.newQueue(addr)
		h.queues[addr] = q
	}
	q.Join(func() *hubRenew { return r })
	h.qmu.Unlock()
	select {
	case <-r.done:
		return r.res, r.err
	case <-ctx.Done():
		// The batcher still answers r; nobody reads it.
		return nil, ctx.Err()
	}
}

// newQueue returns the renewal queue of the node at addr: one pipeline in
// flight at a time, up to h.batch renewals each, with no delay added:
// renewals queued while a pipeline is in flight share the next one. Its
// batcher removes it after h.idle without work. Under the simulator's
// settle (WithHooks) the queue is taken in key order: in the simulator it
// never holds more than a batch, so no renewal waits behind later ones.
func (h *Hub) newQueue(addr string) *batch.Batcher[*hubRenew] {
	var q *batch.Batcher[*hubRenew]
	o := batch.Options[*hubRenew]{
		Send:   h.sendRenewals,
		Lanes:  1,
		Max:    h.batch,
		Linger: h.idle,
		Idle:   func() { h.dropQueue(addr, q) },
	}
	if h.hooks.Settle != nil {
		o.Settle = func() { h.hooks.Settle("hub") }
		o.Order = func(a, b *hubRenew) int { return strings.Compare(a.key, b.key) }
	}
	q = batch.New(o)
	return q
}

// dropQueue removes the queue q of addr once it is idle; a renewal queued
// meanwhile keeps it. It runs on q's sending goroutine, which returns
// after it: q is closed on a goroutine of the Hub's, which Close waits
// for, so Close also waits for the sender of a queue removed. Once Close
// has begun, it closes q itself.
func (h *Hub) dropQueue(addr string, q *batch.Batcher[*hubRenew]) {
	h.qmu.Lock()
	defer h.qmu.Unlock()
	if h.queues[addr] == q && q.Idle() {
		delete(h.queues, addr)
		if !h.qclosed {
			h.dropped.Go(func() { q.Close(nil) })
		}
	}
}

// nodeOf returns the queue key of a renewal of key: on a Cluster client the
// address of the master serving its slot, else "". The lookup runs in the
// caller's goroutine, so it can only ever hold up this renewal: it reads
// the client's slot map without waiting (a stale map is refreshed in the
// background), except before the client's first command, when it loads
// the map within ctx and the client's timeouts. Without an answer the
// renewal goes to the "" queue, whose pipeline finds the node itself.
func (h *Hub) nodeOf(ctx context.Context, key string) string {
	if h.cluster == nil {
		return ""
	}
	node, err := h.cluster.MasterForKey(ctx, key)
	if err != nil {
		return ""
	}
	return node.Options().Addr
}

// sendRenewals runs rs in one pipeline and answers each request. A
// request whose context is already done is answered with its error and not
// sent. The pipeline's context ends at the latest deadline of the batch (or
// at Close).
func (h *Hub) sendRenewals(rs []*hubRenew) {
	live := batch.Live(rs, func(r *hubRenew, err error) {
		r.err = err
		close(r.done)
	})
	if len(live) == 0 {
		return
	}
	ctx, cancel := batch.Bound(h.ctx, live)
	defer cancel()
	cmds := h.runRenewals(ctx, live, true)
	var retry []int
	for i, c := range cmds {
		if batch.NoScript(c.Err()) {
			retry = append(retry, i)
		}
	}
	if len(retry) > 0 {
		// The server lost its script cache: EVAL loads the script again.
		again := make([]*hubRenew, len(retry))
		for j, i := range retry {
			again[j] = live[i]
		}
		for j, c := range h.runRenewals(ctx, again, false) {
			cmds[retry[j]] = c
		}
	}
	for i, r := range live {
		r.res, r.err = cmds[i].Result()
		close(r.done)
	}
}

// runRenewals sends the renew script of each of rs in one pipeline, as
// EVALSHA or (sha false) EVAL.
func (h *Hub) runRenewals(ctx context.Context, rs []*hubRenew, sha bool) []*redis.Cmd {
	head := []any{"evalsha", renewScript.Hash()}
	if !sha {
		head = []any{"eval", renewLua}
	}
	cmds := make([]*redis.Cmd, len(rs))
	for i, r := range rs {
		cmds[i] = redis.NewCmd(ctx, head[0], head[1], 2, r.key, infoKeyOf(r.key), r.val, r.ttl)
		cmds[i].SetFirstKeyPos(3)
	}
	batch.Exec(ctx, h.client, cmds)
	return cmds
}

// queued returns how many renewals wait for a pipeline, in all queues
// (tests).
func (h *Hub) queued() int {
	h.qmu.Lock()
	defer h.qmu.Unlock()
	n := 0
	for _, q := range h.queues {
		n += q.Len()
	}
	return n
}
