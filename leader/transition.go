package leader

// Transition is one step in the life of a term: what Observe reports in a
// Change and what an Elector reports to its Metrics. Observers see
// Elected, Released, Resigned and Expired; an Elector reports Elected,
// Released, Expired and StepDown of its own terms.
type Transition int

const (
	// TransitionElected: a term began. For Observe, the first holder the
	// observer saw or a new term after the previous holder went away.
	TransitionElected Transition = iota + 1
	// TransitionReleased: the holder stepped down gracefully and released
	// the lease (shutdown, a job giving up, or Resign).
	TransitionReleased
	// TransitionResigned: the holder released the lease after a resign
	// request for its term (solo resign, RequestResign); Observe only, an
	// Elector reports TransitionReleased.
	TransitionResigned
	// TransitionExpired: the term ended without a release: the lease ran
	// out (a crash, a partition, a missed renew deadline) or Redis lost it.
	// An Elector reports it when its renew deadline passed or it found the
	// lease lost.
	TransitionExpired
	// TransitionStepDown: an Elector stepped down without releasing (its
	// stop budget ran out); observers see the lease expire.
	TransitionStepDown
)

// String returns the transition's name: elected, released, resigned,
// expired or stepdown.
func (t Transition) String() string {
	switch t {
	case TransitionElected:
		return "elected"
	case TransitionReleased:
		return "released"
	case TransitionResigned:
		return "resigned"
	case TransitionExpired:
		return "expired"
	case TransitionStepDown:
		return "stepdown"
	}
	return "unknown"
}

// Label returns the transition's value of the transition label of
// solo_election_transitions_total: its String, but "lost" for
// TransitionExpired (the label alerts and dashboards select on).
func (t Transition) Label() string {
	if t == TransitionExpired {
		return "lost"
	}
	return t.String()
}
