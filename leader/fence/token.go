package fence

import (
	"context"
	"errors"
	"fmt"
)

// Token is what a fenced write needs from the leadership it is made under:
// the election (the fence row's name), the term and its holder. The worker
// puts one in every job's context and a lock's Hold.Context carries one for
// its hold; Guard.Do and Do read it there. A Token must come from an
// election or a lock, never be made up.
type Token struct {
	// Election names the fence row: the election's name (GROUP.JOB for a
	// spread job, lock:NAME for a lock).
	Election string
	// Term is the fencing term (leader.TermFrom, lock.Hold.Term).
	Term uint64
	// Holder is the term's holder: the elector's ID (leader.Elector.ID),
	// or the lock hold's (lock.Hold.Holder).
	Holder string
}

// String returns "ELECTION term TERM holder HOLDER", as the logs say it.
func (t Token) String() string {
	return fmt.Sprintf("%s term %d holder %s", t.Election, t.Term, t.Holder)
}

// ErrNoToken reports that the context of a fenced write (Guard.Do, Do)
// carries no Token: it does not descend from a job's context (a worker in
// mode always has no term, and gives none) nor from a lock hold's.
var ErrNoToken = errors.New("fence: no fencing token in the context")

type tokenKey struct{}

// WithToken returns a copy of ctx that carries tok, for Guard.Do and Do.
// The worker and package lock call it; a program that runs an elector
// without a worker does it in its leader function:
//
//	fence.WithToken(ctx, fence.Token{Election: e.Config().Name, Term: term, Holder: e.ID()})
func WithToken(ctx context.Context, tok Token) context.Context {
	return context.WithValue(ctx, tokenKey{}, tok)
}

// TokenFrom returns the Token ctx carries; ok is false when it carries none.
// Of nested tokens (a lock taken inside a job) the innermost wins.
func TokenFrom(ctx context.Context) (tok Token, ok bool) {
	tok, ok = ctx.Value(tokenKey{}).(Token)
	return tok, ok
}

// tokenOf returns ctx's token or an error wrapping ErrNoToken.
func tokenOf(ctx context.Context) (Token, error) {
	tok, ok := TokenFrom(ctx)
	if !ok {
		return Token{}, fmt.Errorf("%w (it comes with a worker job's context, a spread job's, or lock.Hold.Context; a worker in mode always has no term)", ErrNoToken)
	}
	return tok, nil
}
