package interpreter

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/tqw-dsl/tqw/runtime/store/objstore"
)

// The answer store: paid answers shared across runs by the content of
// their request, so that a fork never pays twice for a call whose request
// is unchanged. The run memo stays what it was (per run and visit, what
// makes retries and redeliveries free); beside it each paid llm answer is
// also put under tqw/answers/<action>/<hex SHA-256 of the request> (the
// llm action's memo key: base URL, model, messages, parameters, response
// schema; never the API key). Only forks and redriven runs read it (runs
// carrying HeaderForkFrom or headerRedriveAt, Call.ReuseAnswers): a fresh
// run of the same prompt asks the model again, as a sampled answer should. Values are redacted like
// memo entries, so no secret enters the store.
//
// http steps with cache keep their responses there too, under
// http/<hex SHA-256 of the request>, read the same way.
//
// Cost: one PUT per paid answer or kept response (every run), one GET per
// llm attempt of a fork or redrive that its run memo does not answer and
// per attempt of its cached http steps. Retention: an entry is kept for
// the interpreter's Retention after it was written (AnswerSweep, which SweepLoop
// runs at most hourly: one LIST per 1,000 entries plus a DELETE per
// expired entry), forever
// without Retention; a fork of a run older than that pays again.

const answersPrefix = "tqw/answers/" // object: <action>/<hex sha256> shared answer

// answerSweepEvery spaces SweepLoop's passes over the answers.
const answerSweepEvery = time.Hour

// Reuse is what a step did not pay for because a fork reused answers its
// origin (or another run) paid for.
type Reuse struct {
	Calls   int     `msgpack:"n" json:"calls"`
	Tokens  int64   `msgpack:"t" json:"tokens"`
	CostUSD float64 `msgpack:"c" json:"cost_usd"`
}

// Counters of reused answers in a run's totals.
const (
	TotalLLMSavedTokens = "llm_saved_tokens"
	TotalLLMSavedUSD    = "llm_saved_usd"
)

// answerStore is actions.Memo over the shared answers, redacting values.
type answerStore struct {
	store objstore.Store
	red   *redactor
}

// answerKey maps an action's content key ("llm/<hex>") to its object.
func answerKey(key string) (string, error) {
	for _, c := range key {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '/' || c == '_' || c == '-') {
			return "", fmt.Errorf("interpreter: answer key %q: only a-z, 0-9, / _ -", key)
		}
	}
	if key == "" || len(key) > 200 || strings.Contains(key, "//") {
		return "", fmt.Errorf("interpreter: answer key %q is not a content key", key)
	}
	return answersPrefix + key, nil
}

func (a answerStore) Get(ctx context.Context, key string) ([]byte, bool, error) {
	k, err := answerKey(key)
	if err != nil {
		return nil, false, err
	}
	b, _, err := a.store.Get(ctx, k)
	if errors.Is(err, objstore.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("interpreter: read answer %s: %w", k, err)
	}
	return b, true, nil
}

func (a answerStore) Put(ctx context.Context, key string, value []byte) error {
	k, err := answerKey(key)
	if err != nil {
		return err
	}
	if _, err := a.store.Put(ctx, k, a.red.bytes(value), objstore.PutOptions{}); err != nil {
		return fmt.Errorf("interpreter: store answer %s: %w", k, err)
	}
	return nil
}

func (x *exec) answers() answerStore { return answerStore{store: x.it.store, red: x.red} }

// reusesAnswers reports whether the run may take answers from the store:
// a fork, or a redriven run (which went through its steps once already).
func (x *exec) reusesAnswers() bool {
	return x.rs.Headers[HeaderForkFrom] != "" || x.rs.Headers[headerRedriveAt] != ""
}

// AnswerSweep deletes shared answers written more than the interpreter's
// Retention ago; nothing without Retention. Cost: one LIST per 1,000
// entries, one DELETE per expired one.
func (it *Interpreter) AnswerSweep(ctx context.Context) (int, error) {
	if it.retention <= 0 {
		return 0, nil
	}
	cutoff := it.now().Add(-it.retention)
	n, after := 0, ""
	for {
		page, err := it.store.List(ctx, answersPrefix, after, 1000)
		if err != nil {
			return n, fmt.Errorf("interpreter: list answers: %w", err)
		}
		for _, o := range page {
			if o.ModTime.IsZero() || o.ModTime.After(cutoff) {
				continue
			}
			if err := it.store.Delete(ctx, o.Key); err != nil && !errors.Is(err, objstore.ErrNotExist) {
				return n, fmt.Errorf("interpreter: delete answer %s: %w", o.Key, err)
			}
			n++
		}
		if len(page) < 1000 {
			return n, nil
		}
		after = page[len(page)-1].Key
	}
}
