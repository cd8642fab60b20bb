package leader

import (
	"testing"
	"time"
)

// TestElector_LateDeadlineTimerLeavesTheNextTermLeading: term 1's deadline
// timer fired as term 1 ended (Stop came too late to stop it), and its
// goroutine runs only after the loop ended term 1 and began term 2. It
// must leave term 2's status alone.
//
// Mutation check: without endLeadingExpired's open-term check, "term 2
// is live but Status says leading=false, term=0".
func TestElector_LateDeadlineTimerLeavesTheNextTermLeading(t *testing.T) {
	e := &Elector{}
	e.beginTerm(Lease{Term: 1}, time.Now())
	e.endTerm(nil)
	e.beginTerm(Lease{Term: 2}, time.Now())
	e.endLeadingExpired(1)
	if st := e.Status(); !st.Leading || st.Term != 2 {
		t.Fatalf("term 2 is live but Status says leading=%v, term=%d", st.Leading, st.Term)
	}
	if h := e.expiredAt; !h.IsZero() {
		t.Fatalf("term 1's late timer marked term 2 expired at %v", h)
	}
	// Term 2's own timer still ends it.
	e.endLeadingExpired(2)
	if st := e.Status(); st.Leading || st.Term != 0 || e.expiredAt.IsZero() {
		t.Fatalf("term 2's deadline: Status leading=%v, term=%d, expiredAt %v", st.Leading, st.Term, e.expiredAt)
	}
}
