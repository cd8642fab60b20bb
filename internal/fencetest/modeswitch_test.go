package fencetest_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/solo-run/solo/internal/redistest"
	"github.com/solo-run/solo/leader"
	"github.com/solo-run/solo/leader/fence"
	"github.com/solo-run/solo/worker"
)

// fencedJob writes one fenced row as it starts, sends its token (or the
// write's error) on tokens, and runs until cancelled.
func fencedJob(e *env, who string, tokens chan<- fence.Token, errs chan<- error) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		tok, _ := fence.TokenFrom(ctx)
		if err := e.g.Do(ctx, func(tx *sql.Tx) error { return e.insert(ctx, tx, who, tok.Term) }); err != nil {
			errs <- fmt.Errorf("%s: fenced write of %v: %w", who, tok, err)
		} else {
			tokens <- tok
		}
		<-ctx.Done()
		return nil
	}
}

// runFor runs r until the returned stop is called.
func runFor(r func(context.Context) error) (stop func() error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r(ctx) }()
	return func() error { cancel(); return <-done }
}

// TestModeSwitch_FencesTheOldMode: an elect-mode leader of the name "msw"
// claims the fence row msw and writes; the name switches to spread mode
// (the elect-mode instance stopped, as the procedure says) and a spread
// member runs the job, claiming its row msw.j. The old elect-mode leader's
// token — a leader frozen past its lease would still hold it — is refused
// from then on (ErrStaleTerm): the member claimed the row msw with a term
// it reserved from the elect-mode election. Switching back, a new
// elect-mode leader's claim and writes go through.
//
// Mutation: without the member's claim of the row msw this fails with
// "the old elect-mode leader's write after the switch: <nil>, want
// ErrStaleTerm".
func TestModeSwitch_FencesTheOldMode(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	// termLost: Redis loses the term key between the modes (a restart
	// without persistence, a lagging replica promoted): the reserved term
	// must still be above the old leader's.
	for _, termLost := range []bool{false, true} {
		t.Run(fmt.Sprintf("term key lost %v", termLost), func(t *testing.T) {
			testModeSwitch(t, client, termLost)
		})
	}
}

func testModeSwitch(t *testing.T, client redis.UniversalClient, termLost bool) {
	forEachBackend(t, func(t *testing.T, newEnv func(t *testing.T) *env) {
		e := newEnv(t)
		name := fmt.Sprintf("msw%d", tables.Add(1))
		tokens, errs := make(chan fence.Token, 4), make(chan error, 4)
		next := func(what string) fence.Token {
			t.Helper()
			select {
			case tok := <-tokens:
				return tok
			case err := <-errs:
				t.Fatalf("%s: %v", what, err)
			case <-time.After(20 * time.Second):
				t.Fatalf("%s: the job did not write within 20s", what)
			}
			return fence.Token{}
		}
		elect := func(id string) func() error {
			el, err := leader.New(client, leader.Config{Name: name, ID: id, TTL: time.Second})
			if err != nil {
				t.Fatal(err)
			}
			w, err := worker.New(el, worker.WithFence(e.g))
			if err != nil {
				t.Fatal(err)
			}
			if err := w.Pull("j", fencedJob(e, id, tokens, errs)); err != nil {
				t.Fatal(err)
			}
			return runFor(w.Run)
		}
		stop := elect("e")
		old := next("elect-mode leader")
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		if termLost {
			if err := client.Del(ctxT(t), leader.Config{Name: name}.TermKey()).Err(); err != nil {
				t.Fatal(err)
			}
		}

		s := newSpread(t, client, name, e, tokens, errs)
		stop = runFor(s.Run)
		if tok := next("spread member"); tok.Election != name+".j" {
			t.Fatalf("spread job's token %v, want election %s.j", tok, name)
		}
		err := e.g.Do(fence.WithToken(ctxT(t), old), func(tx *sql.Tx) error { return e.insert(ctxT(t), tx, "old", old.Term) })
		if !errors.Is(err, fence.ErrStaleTerm) {
			t.Errorf("the old elect-mode leader's write after the switch: %v, want ErrStaleTerm", err)
		}
		if err := stop(); err != nil {
			t.Fatal(err)
		}

		stop = elect("e2") // and back: the new elect-mode leader claims and writes
		if tok := next("elect-mode leader after switching back"); tok.Term <= old.Term {
			t.Errorf("term %d after switching back, want above %d", tok.Term, old.Term)
		}
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		if n := e.count(t, "old"); n != 0 {
			t.Errorf("%d writes of the old leader committed after the switch", n)
		}
	})
}

func newSpread(t *testing.T, client redis.UniversalClient, name string, e *env, tokens chan<- fence.Token, errs chan<- error) *worker.Spread {
	t.Helper()
	s, err := worker.NewSpread(client, leader.Config{Name: name, ID: "a", TTL: time.Second}, worker.SpreadConfig{}, worker.WithFence(e.g))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Pull("j", fencedJob(e, "a", tokens, errs)); err != nil {
		t.Fatal(err)
	}
	return s
}
