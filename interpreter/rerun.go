package interpreter

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/tqw-dsl/tqw/internal/procid"
	"github.com/tqw-dsl/tqw/runtime/store/objstore"
)

// Reruns. `tqw-dsl run FILE` started again after the process that ran
// FILE died must finish the interrupted run, not start a second one. The
// command names what it asks for by a run key (the pinned definitions
// and the input); while it follows a run it keeps a claim object
// tqw/rerun/<key>/<run id> naming its process. A later command with the
// same key finds the claims of dead processes and resumes (or, if the run
// ended meanwhile, reports) that run. The claim is deleted once a command
// reported the run's end, and by the retention sweep otherwise. They are
// objects, not KV entries, so a command that is not the store's writer
// (one following a run through a live worker) handles them too.

// headerRunKey is the run header carrying the run key of a run submitted
// by `tqw-dsl run`, so retention can remove its claim.
const headerRunKey = "tqw.runkey"

// rerunPrefix is the object prefix of run claims.
const rerunPrefix = "tqw/rerun/"

// maxClaim bounds a claim object read back.
const maxClaim = 4 << 10

// RunKey returns the run key of running w on input: the same workflow
// files (by content, with what they call) and the same input give the
// same key. It is a hex SHA-256, safe in object keys.
func RunKey(w *Workflow, input any) (string, error) {
	p, err := plain(input)
	if err != nil {
		return "", err
	}
	in, err := json.Marshal(p) // map keys sorted: a canonical form
	if err != nil {
		return "", err
	}
	h := sha256.New()
	writePin(h, w.pin)
	h.Write([]byte{0})
	h.Write(in)
	return hex.EncodeToString(h.Sum(nil)), nil
}

func writePin(h interface{ Write([]byte) (int, error) }, p *pin) {
	h.Write([]byte(p.Hash))
	ids := make([]string, 0, len(p.Calls))
	for id := range p.Calls {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		h.Write([]byte("\x00" + id + "\x00"))
		writePin(h, p.Calls[id])
	}
}

// FileKey returns the key of running the file at path on input, whatever
// its content: `tqw-dsl run` claims its run under it too, so that after
// the file was edited it can name a run an earlier version left
// interrupted (RunKey, which covers the content, no longer finds it). It
// is a hex SHA-256 like RunKey.
func FileKey(path string, input any) (string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", err
	}
	p, err := plain(input)
	if err != nil {
		return "", err
	}
	in, err := json.Marshal(p)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	h.Write([]byte("file\x00" + abs + "\x00"))
	h.Write(in)
	return hex.EncodeToString(h.Sum(nil)), nil
}

// RunClaim says which process follows a run submitted under a run key.
type RunClaim struct {
	RunID string          `json:"run"`
	Key   string          `json:"key"`
	Owner procid.Identity `json:"owner"`
	Since time.Time       `json:"since"`
}

// OwnerDead reports whether the claiming process certainly exited.
func (c RunClaim) OwnerDead() bool {
	dead, known := c.Owner.Dead()
	return dead && known
}

func claimKey(key, runID string) string { return rerunPrefix + key + "/" + runID }

// ClaimRun records that this process follows runID, submitted under key
// (replacing an earlier claim of it). Cost: one PUT.
func ClaimRun(ctx context.Context, store objstore.Store, key, runID string, now time.Time) error {
	b, err := json.Marshal(RunClaim{RunID: runID, Key: key, Owner: procid.Self(), Since: now})
	if err != nil {
		return err
	}
	if _, err := store.Put(ctx, claimKey(key, runID), b, objstore.PutOptions{}); err != nil {
		return fmt.Errorf("interpreter: record the claim of run %s: %w", runID, err)
	}
	return nil
}

// ReleaseRun deletes the claim of runID once its end was reported. Cost:
// one DELETE.
func ReleaseRun(ctx context.Context, store objstore.Store, key, runID string) error {
	err := store.Delete(ctx, claimKey(key, runID))
	if err != nil && !errors.Is(err, objstore.ErrNotExist) {
		return fmt.Errorf("interpreter: delete the claim of run %s: %w", runID, err)
	}
	return nil
}

// RunClaims returns the claims under key, newest run first. Cost: one
// LIST per 1,000 claims and one GET per claim (there is one per run of
// this key not yet reported, usually none or one).
func RunClaims(ctx context.Context, store objstore.Store, key string) ([]RunClaim, error) {
	prefix := rerunPrefix + key + "/"
	var out []RunClaim
	after := ""
	for {
		page, err := store.List(ctx, prefix, after, 1000)
		if err != nil {
			return nil, fmt.Errorf("interpreter: list run claims: %w", err)
		}
		for _, o := range page {
			b, _, err := store.Get(ctx, o.Key)
			if errors.Is(err, objstore.ErrNotExist) {
				continue // released meanwhile
			}
			if err != nil {
				return nil, fmt.Errorf("interpreter: read run claim %s: %w", o.Key, err)
			}
			var c RunClaim
			if len(b) > maxClaim || json.Unmarshal(b, &c) != nil || c.RunID != strings.TrimPrefix(o.Key, prefix) {
				// Not ours to judge: a damaged claim is left alone and
				// ignored, so the command starts a fresh run.
				continue
			}
			out = append(out, c)
		}
		if len(page) < 1000 {
			break
		}
		after = page[len(page)-1].Key
	}
	sort.Slice(out, func(i, j int) bool { return out[i].RunID > out[j].RunID })
	return out, nil
}

// validRunKey reports whether s looks like a RunKey (64 hex digits).
func validRunKey(s string) bool {
	if len(s) != 64 {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil
}
