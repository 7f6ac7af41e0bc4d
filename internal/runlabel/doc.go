// Package runlabel holds the rules a run label obeys, in one place for
// the runtime that indexes labels (runstate.ValidateLabels) and the
// workflow loader that checks the labels a file declares (package dsl,
// which may not import the runtime). It does no I/O and costs no
// object-store requests.
package runlabel
