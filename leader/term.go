package leader

import (
	"context"
	"crypto/rand"
	"encoding/hex"
)

type termKey struct{}

// TermFrom returns the fencing term carried by a leader function's context.
// ok is false for a context that does not descend from one.
func TermFrom(ctx context.Context) (term uint64, ok bool) {
	term, ok = ctx.Value(termKey{}).(uint64)
	return term, ok
}

// withTerm returns a context carrying term, as the elector gives a leader
// function. It is unexported so that no caller can forge a term: a term
// comes only from a lease this process won.
func withTerm(ctx context.Context, term uint64) context.Context {
	return context.WithValue(ctx, termKey{}, term)
}

// randomToken returns 48 random bits in hex: the per-Elector part of an ID.
func randomToken() string {
	var b [6]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on Linux since Go 1.24
	return hex.EncodeToString(b[:])
}
