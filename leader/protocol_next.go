//go:build solo_skew_next

package leader

// A build with the tag solo_skew_next speaks protocol Protocol+1 and
// shares an election only with it: the skew test's stand-in for a next
// protocol that drops the current one (cmd/solo/skew_test.go). Never
// built into a release.
func init() { protocol, minPeerProtocol = Protocol+1, Protocol+1 }
