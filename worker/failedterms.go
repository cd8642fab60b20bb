package worker

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"go.uber.org/zap"

	"github.com/solo-run/solo/leader"
)

// failedTermsKey is the checkpoint that counts the election's failed
// terms in a row. A checkpoint only grows, so it holds
// base×failedTermsBase + n: n failed terms in a row since the successful
// term base (0 before any). A failed term adds 1; a success writes
// term×failedTermsBase, above every earlier value because terms grow.
const (
	failedTermsKey  = "failed-terms"
	failedTermsBase = 1000
)

// electTerm is term with the group-wide count of failed terms: it gives up
// at the start of a term when the count reached MaxFailedTerms and this
// process had a failed term of its own (a newly started instance gets one
// try: a fix deployed by restarting every instance is not refused), and
// after a failed term that brings the count there.
func (w *Worker) electTerm(ctx context.Context, jobs []*job, stop context.CancelCauseFunc) error {
	term, _ := leader.TermFrom(ctx)
	election := w.elector.Config().Name
	v, _, err := w.elector.LoadCheckpoint(ctx, failedTermsKey)
	if err != nil {
		w.log.Warn("cannot read the count of failed terms; running the term", zap.Error(err), zap.Uint64("term", term))
	}
	n := v % failedTermsBase
	w.metrics.FailedTerms(election, n)
	if int(n) >= w.policy.MaxFailedTerms && w.ownFailed > 0 {
		w.giveUp(n, stop)
		return nil // releases the lease: the next candidate finds the count too
	}
	healthy := make(chan struct{}, 1)
	var wg sync.WaitGroup
	hctx, hstop := context.WithCancel(ctx)
	reset := false // written by the goroutine below before wg.Done
	if n > 0 {
		// Reset the count at the term's first sign of health.
		wg.Go(func() {
			select {
			case <-hctx.Done():
				return
			case <-healthy:
			}
			if err := w.elector.Checkpoint(hctx, failedTermsKey, int64(term)*failedTermsBase); err != nil && hctx.Err() == nil {
				w.log.Warn("cannot reset the count of failed terms", zap.Error(err), zap.Uint64("term", term))
				return
			}
			reset = true
			w.metrics.FailedTerms(election, 0)
		})
	}
	err = w.term(ctx, jobs, w.elector.Checkpoint, healthy)
	hstop()
	wg.Wait()
	if !errors.Is(err, errTermFailed) || ctx.Err() != nil {
		return err
	}
	w.ownFailed++
	next := v + 1
	switch {
	case reset:
		next = int64(term)*failedTermsBase + 1 // healthy first, then failed
	case n >= failedTermsBase-1:
		next = v // saturated: keep counting as the maximum
	}
	// The lease is still held (the term resigns after this): fenced by it.
	if cerr := w.elector.Checkpoint(ctx, failedTermsKey, next); cerr != nil {
		w.log.Warn("cannot record the failed term", zap.Error(cerr), zap.Uint64("term", term))
		return err
	}
	n = next % failedTermsBase
	w.metrics.FailedTerms(election, n)
	if int(n) >= w.policy.MaxFailedTerms {
		w.giveUp(n, stop)
	}
	return err
}

// giveUp stops campaigning for good, logged once.
func (w *Worker) giveUp(n int64, stop context.CancelCauseFunc) {
	err := fmt.Errorf("%w: %d failed terms in a row across the election (worker.max_failed_terms %d); this instance stops campaigning",
		ErrGaveUp, n, w.policy.MaxFailedTerms)
	if w.gaveUp.CompareAndSwap(nil, &err) {
		w.log.Error("giving up: the election's jobs keep failing on every instance", zap.Int64("failed_terms", n),
			zap.Int("max_failed_terms", w.policy.MaxFailedTerms))
		w.metrics.GaveUp(w.elector.Config().Name)
	}
	stop(err)
}
