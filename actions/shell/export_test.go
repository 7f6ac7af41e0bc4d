package shell

import (
	"errors"
	"os"

	"github.com/tqw-dsl/tqw/actions/shell/internal/supervisor"
)

// RunUnsupervisedForTest makes the action start commands without a
// supervisor, as when the worker's executable cannot be found, until
// restore is called.
func RunUnsupervisedForTest() (restore func()) {
	saved := supervisorPath
	supervisorPath = func() (string, error) { return "", errors.New("supervisor disabled by the test") }
	return func() { supervisorPath = saved }
}

// SupervisorFromForTest makes the action start supervisors from the
// executable exe (which must link this package), until restore is called.
func SupervisorFromForTest(exe string) (restore func()) {
	saved := supervisorPath
	supervisorPath = func() (string, error) { return exe, nil }
	return func() { supervisorPath = saved }
}

// OnSupervisedForTest calls f with the lifeline of each supervised command
// once it started.
func OnSupervisedForTest(f func(lifeline *os.File)) { testHookSupervised = f }

// Supervisor protocol names, for tests that start a supervisor by hand.
const (
	SupervisorEnvForTest     = supervisor.Env
	SupervisorVersionForTest = supervisor.Version
)
