package worker

import (
	"context"
	_ "embed"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/solo-run/solo/internal/bounded"
	"github.com/solo-run/solo/internal/rediserr"
	"github.com/solo-run/solo/leader/fence"
)

// A Spread's jobs claim their own fence rows (GROUP.JOB), while an
// elect-mode leader of the same name claims the row GROUP. After a switch
// from mode elect, nothing would raise the row GROUP again, and the old
// elect-mode leader — frozen past its lease, then resumed — would still
// commit fenced writes. So before the first job of a membership runs, the
// member reserves a term of the elect-mode election GROUP (reserve.lua:
// minted as an acquire mints, above every term handed out before, even
// when Redis lost the term key; no elect-mode leader is handed that term
// or a lower one after it) and claims the row GROUP with it, holder the member ID. Every
// elect-mode leader before the switch holds a lower term: its fenced
// writes are refused (fence.ErrStaleTerm) from then on. An elect-mode
// leader after a later switch back gets a higher term, and claims the row
// as usual.

// fenceGroup claims the row of the group's name, as above, once per
// membership (s.gen), before u's job runs; with no fence it does nothing.
// It retries as a term's own claim does (Worker.claimFence): nil once
// claimed or ctx ended, an error wrapping leader.ErrResigned after
// Policy.MaxFailures failures in a row.
func (s *Spread) fenceGroup(ctx context.Context, u *unit) error {
	if u.w.fence == nil {
		return nil
	}
	select { // one claim per membership, not one per job
	case s.fenceSem <- struct{}{}:
		defer func() { <-s.fenceSem }()
	case <-ctx.Done():
		return nil
	}
	s.mu.Lock()
	gen, done := s.gen, s.fencedGen == s.gen
	s.mu.Unlock()
	if done {
		return nil
	}
	claim := func(ctx context.Context) error {
		rctx, cancel := context.WithTimeout(ctx, s.cfg.RenewDeadline)
		defer cancel()
		term, err := bounded.Call(rctx, func() (int64, error) {
			return reserveScript.Run(rctx, s.client, []string{s.cfg.TermKey()}).Int64()
		})
		if err != nil {
			return fmt.Errorf("reserve a term of %q: %w", s.cfg.Name, err)
		}
		err = u.w.fence.Claim(ctx, s.cfg.Name, uint64(term), s.member)
		if errors.Is(err, fence.ErrStaleTerm) {
			// The row holds a higher term: a later reservation or a later
			// elect-mode leader's, above every term before ours: as good.
			return nil
		}
		return err
	}
	if err := u.w.claimFence(ctx, s.log, s.cfg.Name, claim); err != nil || ctx.Err() != nil {
		return err
	}
	s.mu.Lock()
	s.fencedGen = gen
	s.mu.Unlock()
	return nil
}

//go:embed reserve.lua
var reserveLua string

var reserveScript = redis.NewScript(reserveLua)

func init() { rediserr.Register("spread term reserve", reserveLua) }
