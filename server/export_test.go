package server

// SetReplayRing sets how many events the brokers of servers made from
// now on keep for reconnecting clients; it returns the undo.
func SetReplayRing(n int) (restore func()) {
	old := replayRing
	replayRing = n
	return func() { replayRing = old }
}
