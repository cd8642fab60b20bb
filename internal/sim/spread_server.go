package sim

import "time"

// execWrite runs one plain write command (not a script) on the primary at
// fake time now and replicates its effects as one write, under w.mu: what
// the candidates and spread members send outside scripts (ZREM of
// RedisStore.Withdraw when an Elector's Run ends).
func (w *world) execWrite(now time.Time, args []string, res *execResult) any {
	c := &cmdCtx{ks: &w.prim.ks, srv: w.srvNs(now)}
	r, err := c.do(args)
	if err != nil {
		return err
	}
	if len(c.dirty) > 0 {
		wr := repWrite{keys: make([]keySnap, len(c.dirty))}
		for i, k := range c.dirty {
			wr.keys[i] = keySnap{key: k}
			if e := c.ks.m[k]; e != nil {
				wr.keys[i].e = e.clone()
			}
		}
		at := w.replicate(now, wr)
		if res != nil {
			res.applyAt = at
		}
	}
	return r
}
