package leader

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Protocol is the version of what this build writes to and expects from
// Redis for an election: its keys, the lease's value "TERM ID", the info
// hash, the scripts' meaning, the notices. The versions and the skew
// policy: docs/design.md, "Protocol and versions".
const Protocol = 1

// MinPeerProtocol is the oldest protocol this build shares an election
// with. Two builds share one when each one's Protocol is at least the
// other's MinPeerProtocol; a lease whose holder recorded no protocol is
// protocol 1.
const MinPeerProtocol = 1

// protocol and minPeerProtocol are what this build's acquire sends: the
// constants, but for a build with the tag solo_skew_next (protocol_next.go:
// the skew test's stand-in for a next protocol that drops protocol 1).
var protocol, minPeerProtocol = Protocol, MinPeerProtocol

// SpokenProtocol returns the protocol this build speaks and the oldest it
// shares an election with: Protocol and MinPeerProtocol, except in a test
// build standing in for the next protocol.
func SpokenProtocol() (proto, minPeer int) { return protocol, minPeerProtocol }

// ErrProtocolSkew is wrapped by the *ProtocolError of an acquire refused
// because the holder speaks a protocol this build does not share an
// election with (or the other way round).
var ErrProtocolSkew = errors.New("leader: the holder speaks an incompatible protocol")

// ProtocolError is an acquire refused for version skew: the lease is held
// by a build whose protocol this one does not share an election with. The
// Elector does not campaign while it lasts (Status.ProtocolErr) and asks
// again every RetryInterval (docs/design.md, "Protocol and versions").
type ProtocolError struct {
	// Holder is the lease that refused the acquire.
	Holder Lease
	// Protocol and MinPeer are the holder's protocol and the oldest it
	// shares an election with (1 and 1 for a holder that recorded none).
	Protocol, MinPeer int
	// Own and OwnMinPeer are this build's.
	Own, OwnMinPeer int
}

func (e *ProtocolError) Error() string {
	return fmt.Sprintf("leader: the holder %s (term %d) speaks protocol %d and shares an election with protocols %d and up; "+
		"this build speaks protocol %d and shares one with %d and up",
		e.Holder.ID, e.Holder.Term, e.Protocol, e.MinPeer, e.Own, e.OwnMinPeer)
}

// Unwrap returns ErrProtocolSkew.
func (e *ProtocolError) Unwrap() error { return ErrProtocolSkew }

// parseProtocols reads "PROTO PROTO_MIN" (acquire.lua's refusal) into p
// and m.
func parseProtocols(s string, p, m *int) bool {
	a, b, ok := strings.Cut(s, " ")
	if !ok {
		return false
	}
	x, err1 := strconv.Atoi(a)
	y, err2 := strconv.Atoi(b)
	if err1 != nil || err2 != nil {
		return false
	}
	*p, *m = x, y
	return true
}
