package server

// SetReplayRing sets how many events the brokers of servers made from
// now on keep for reconnecting clients; it returns the undo.
func SetReplayRing(n int) (restore func()) {
	old := replayRing
	replayRing = n
	return func() { replayRing = old }
}

// SetSubscriberBuffer sets how many events a stream of a server made
// from now on may lag behind before it is told to resync; it returns the
// undo.
func SetSubscriberBuffer(n int) (restore func()) {
	old := subscriberBuffer
	subscriberBuffer = n
	return func() { subscriberBuffer = old }
}

// SetCountCap sets how many runs GET /v1/runs counts under a workflow,
// label or time filter; it returns the undo.
func SetCountCap(n int) (restore func()) {
	old := countCap
	countCap = n
	return func() { countCap = old }
}

// EventPolls returns how many polls the server's event broker has done.
func (s *Server) EventPolls() uint64 { return s.events.polls.Load() }

// EventStreamsOfEveryRun returns how many streams of every run are open.
func (s *Server) EventStreamsOfEveryRun() int {
	_, all := s.events.snapshot()
	return len(all)
}
