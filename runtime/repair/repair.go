package repair

import (
	"context"
	"log/slog"

	"github.com/tqw-dsl/tqw/runtime/store/kv"
	"github.com/tqw-dsl/tqw/runtime/store/objstore"
)

// Options say where the store's log is.
type Options struct {
	// Prefix is the queue's prefix in the store (storage.Options.Prefix);
	// default "queue", the queue's default.
	Prefix string
	// Logger receives progress and what was deleted (default slog.Default()).
	Logger *slog.Logger
}

func (o Options) kv() kv.Options {
	if o.Prefix == "" {
		o.Prefix = "queue"
	}
	return kv.Options{Prefix: o.Prefix, Logger: o.Logger}
}

// What a check finds and what a truncation discards.
type (
	// Report is the result of Check; Healthy says whether it found nothing.
	Report = kv.Report
	// Problem is one thing wrong with one object.
	Problem = kv.Problem
	// Truncation is what a cut of the log at one sequence discards (Plan)
	// or discarded (Truncate).
	Truncation = kv.Truncation
)

// ErrTruncatePoint reports a WAL sequence the log cannot be cut at.
var ErrTruncatePoint = kv.ErrTruncatePoint

// Check verifies the store read-only and reports every problem it finds,
// object by object (kv.Check). The error is for a check that could not be
// done; what is wrong with the store is in the Report.
func Check(ctx context.Context, store objstore.Store, o Options) (Report, error) {
	return kv.Check(ctx, store, o.kv())
}

// Plan reports what cutting the log at sequence at would discard, writing
// nothing (kv.PlanTruncate).
func Plan(ctx context.Context, store objstore.Store, o Options, at uint64) (Truncation, error) {
	return kv.PlanTruncate(ctx, store, o.kv(), at)
}

// Truncate cuts the log at sequence at, discarding every commit from
// there on, so a store whose log breaks there opens again (kv.TruncateAt).
// Never call it while a writer that must keep running holds the store.
func Truncate(ctx context.Context, store objstore.Store, o Options, at uint64) (Truncation, error) {
	return kv.TruncateAt(ctx, store, o.kv(), at)
}

// The kinds of Problem a check of objects beside the kv reports too.
const (
	// ProblemMissing: an object the store needs is not there.
	ProblemMissing = kv.ProblemMissing
	// ProblemDamaged: the object fails its checksum or does not decode.
	ProblemDamaged = kv.ProblemDamaged
)
