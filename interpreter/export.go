package interpreter

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/tqw-dsl/tqw/runtime"
	rtmemo "github.com/tqw-dsl/tqw/runtime/memo"
	"github.com/tqw-dsl/tqw/runtime/runstate"
	"github.com/tqw-dsl/tqw/runtime/storage"
	"github.com/tqw-dsl/tqw/runtime/store/objstore"
)

// Moving runs. ExportRun turns a run (live or sealed) into the files of a
// portable folder: manifest.json (the run, its status and the SHA-256 of
// every other file), definitions/<hash>.yaml (the pinned definitions),
// records.jsonl (its history and output records as the store keeps
// them), objects/ (its large outputs), answers/ (the llm answers its memo
// holds) and, for people, input.json and history.json. Secrets are
// absent as everywhere: every value was redacted before it was stored.
// ImportRun writes such a folder into another store, after checking all
// of it, so a damaged or altered folder writes nothing: the run's history
// can then be read (history, diff) and forked there. The runtime knows
// nothing of an imported run (status and list do not show it); its
// records carry a retention marker of the import time, so the sweep
// removes them as it removes a finished run's.

// exportFormat names the folder format in manifest.json.
const exportFormat = "tqw-run/1"

// exportManifest is manifest.json.
type exportManifest struct {
	Format     string            `json:"format"`
	Run        string            `json:"run"`
	Workflow   string            `json:"workflow,omitempty"`
	Definition string            `json:"definition,omitempty"`
	State      string            `json:"state,omitempty"`
	Result     json.RawMessage   `json:"result,omitempty"`
	Error      string            `json:"error,omitempty"`
	ForkedFrom string            `json:"forked_from,omitempty"`
	ForkedAt   string            `json:"forked_at,omitempty"`
	Exported   time.Time         `json:"exported_at"`
	Files      map[string]string `json:"files"` // path: hex SHA-256
}

// exportRecord is a line of records.jsonl.
type exportRecord struct {
	Key   string `json:"key"`
	Value string `json:"value"` // base64 of the stored bytes
}

var llmMemoKey = regexp.MustCompile(`^v[0-9]+\.((?:llm)/[0-9a-f]{64})$`)

// ExportRun returns the files (path: bytes) of a portable folder holding
// run st.RunID, read from r (WithSealed for sealed runs) and store; memos
// gives the llm answers the run's memo holds. Cost: the run's records
// (memory reads, or one GET of a sealed run's segment), one GET per
// definition and per large output, one LIST of the run's memo plus a
// GET per entry.
func ExportRun(ctx context.Context, r Reader, store objstore.Store, memos *rtmemo.Store, st runstate.Status) (map[string][]byte, error) {
	runID := st.RunID
	entries, err := runRecords(ctx, r, runID)
	if err != nil {
		return nil, err
	}
	if len(entries) == 0 {
		return nil, fmt.Errorf("%w: run %s has no records to export", runtime.ErrRunNotFound, runID)
	}
	files := map[string][]byte{}
	var lines []byte
	defs := map[string]bool{}
	if h := st.Headers[HeaderDefinition]; h != "" {
		defs[h] = true
	}
	for _, e := range entries {
		line, _ := json.Marshal(exportRecord{Key: e.Key, Value: base64.StdEncoding.EncodeToString(e.Value)})
		lines = append(append(lines, line...), '\n')
		var ref string
		if strings.HasPrefix(e.Key, histPrefix(runID)) {
			var h HistoryRecord
			if err := decodeMsgpack(e.Value, &h); err != nil {
				return nil, fmt.Errorf("history record %s: %w", e.Key, err)
			}
			ref = h.OutputRef
			if h.RunStart != nil {
				addPinHashes(defs, h.RunStart.Pin)
				if in, err := json.MarshalIndent(h.RunStart.Input, "", "  "); err == nil {
					files["input.json"] = append(in, '\n')
				}
			}
		} else if strings.HasPrefix(e.Key, outPrefix(runID)) {
			var o outputRecord
			if err := decodeMsgpack(e.Value, &o); err != nil {
				return nil, fmt.Errorf("output record %s: %w", e.Key, err)
			}
			ref = o.Ref
		}
		if ref != "" && files["objects/"+ref] == nil {
			b, _, err := store.Get(ctx, ref)
			if err != nil {
				return nil, fmt.Errorf("interpreter: read output %s: %w", ref, err)
			}
			if _, err := checkOutputObject(ref, b); err != nil {
				return nil, damaged(ref, err)
			}
			files["objects/"+ref] = b
		}
	}
	files["records.jsonl"] = lines
	for h := range defs {
		src, _, err := store.Get(ctx, defKey(h))
		if err != nil {
			return nil, fmt.Errorf("interpreter: read definition %s: %w", h, err)
		}
		if err := checkDefinition(h, src); err != nil {
			return nil, damaged(defKey(h), err)
		}
		files["definitions/"+h+".yaml"] = src
	}
	if memos != nil {
		m, err := memos.RunEntries(ctx, runID)
		if err != nil {
			return nil, err
		}
		for k, v := range m {
			if g := llmMemoKey.FindStringSubmatch(k); g != nil {
				files["answers/"+g[1]+".json"] = v
			}
		}
	}
	if recs, err := history(ctx, r, store, runID); err == nil {
		if b, err := json.MarshalIndent(recs, "", "  "); err == nil {
			files["history.json"] = append(b, '\n')
		}
	}
	man := exportManifest{Format: exportFormat, Run: runID, Workflow: st.Headers[HeaderWorkflow], Definition: st.Headers[HeaderDefinition],
		State: st.State.String(), Error: st.Error, ForkedFrom: st.Headers[HeaderForkFrom], ForkedAt: st.Headers[HeaderForkAt],
		Exported: time.Now().UTC(), Files: map[string]string{}}
	if json.Valid(st.Result) {
		man.Result = st.Result
	}
	for p, b := range files {
		sum := sha256.Sum256(b)
		man.Files[p] = hex.EncodeToString(sum[:])
	}
	mb, err := json.MarshalIndent(man, "", "  ")
	if err != nil {
		return nil, err
	}
	files["manifest.json"] = append(mb, '\n')
	return files, nil
}

func addPinHashes(set map[string]bool, p *pin) {
	if p == nil {
		return
	}
	set[p.Hash] = true
	for _, c := range p.Calls {
		addPinHashes(set, c)
	}
}

// runRecords returns the raw records of runID (history, outputs, child
// index), from its segment when sealed, else from the KV store.
func runRecords(ctx context.Context, r Reader, runID string) ([]storage.KVEntry, error) {
	prefixes := []string{histPrefix(runID), outPrefix(runID), childPrefix(runID)}
	if s, ok := r.(sealedReader); ok && s.sealed != nil {
		var out []storage.KVEntry
		sealed := false
		for _, p := range prefixes {
			es, ok, err := s.sealed.SealedRecords(ctx, runID, p)
			if err != nil {
				return nil, fmt.Errorf("interpreter: records of sealed run %s: %w", runID, err)
			}
			sealed = sealed || ok
			out = append(out, es...)
		}
		if sealed {
			return out, nil
		}
	}
	var out []storage.KVEntry
	for _, p := range prefixes {
		if err := scanKeys(ctx, r, p, func(e storage.KVEntry) error { out = append(out, e); return nil }); err != nil {
			return nil, fmt.Errorf("interpreter: records of run %s: %w", runID, err)
		}
	}
	return out, nil
}

// ErrDamagedExport is matched by ImportRun's error for a folder that is
// not what ExportRun wrote: a file missing, changed or out of place.
var ErrDamagedExport = errors.New("interpreter: damaged run folder")

// ImportRun checks the files of a folder ExportRun wrote (path: bytes)
// and writes the run into the interpreter's store: definitions, large
// outputs and answers as objects, then its records and a retention marker
// in one durable commit that applies only while the store has no run of
// that id. Any problem (a checksum, a file out of place, a record that
// does not decode, the id taken) is an error before anything is written.
// Cost: one HEAD (and PUT) per definition, one PUT per large output and
// answer, one durable commit.
func (it *Interpreter) ImportRun(ctx context.Context, files map[string][]byte) (string, error) {
	imp, err := checkRunFolder(files)
	if err != nil {
		return "", err
	}
	return imp.runID, it.importRun(ctx, imp)
}

// CheckRunFolder checks the files of a folder ExportRun wrote, as
// ImportRun does before it writes, and returns the run's id: a command
// refuses a damaged folder before it opens a store. Cost: none.
func CheckRunFolder(files map[string][]byte) (string, error) {
	imp, err := checkRunFolder(files)
	if err != nil {
		return "", err
	}
	return imp.runID, nil
}

// runImport is a checked run folder.
type runImport struct {
	runID   string
	defs    map[string][]byte
	objects map[string][]byte
	answers map[string][]byte
	puts    []storage.KVWrite
}

func checkRunFolder(files map[string][]byte) (*runImport, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrDamagedExport, fmt.Sprintf(format, args...))
	}
	var man exportManifest
	if err := json.Unmarshal(files["manifest.json"], &man); err != nil {
		return nil, bad("manifest.json does not read: %v", err)
	}
	if man.Format != exportFormat {
		return nil, bad("manifest.json: format %q, this build reads %q", man.Format, exportFormat)
	}
	runID := man.Run
	if err := runstate.ValidateRunID(runID); err != nil {
		return nil, bad("manifest.json: %v", err)
	}
	for p := range files {
		if _, listed := man.Files[p]; !listed && p != "manifest.json" {
			return nil, bad("%s is not listed in manifest.json", p)
		}
	}
	paths := make([]string, 0, len(man.Files))
	for p := range man.Files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		b, ok := files[p]
		if !ok {
			return nil, bad("%s is missing", p)
		}
		sum := sha256.Sum256(b)
		if hex.EncodeToString(sum[:]) != man.Files[p] {
			return nil, bad("%s does not match its SHA-256 in manifest.json (changed or damaged)", p)
		}
	}
	var (
		defs    = map[string][]byte{}
		objects = map[string][]byte{}
		answers = map[string][]byte{}
		puts    []storage.KVWrite
	)
	for _, p := range paths {
		b := files[p]
		switch {
		case strings.HasPrefix(p, "definitions/"):
			h := strings.TrimSuffix(strings.TrimPrefix(p, "definitions/"), ".yaml")
			if err := checkDefinition(h, b); err != nil {
				return nil, bad("%s: %v", p, err)
			}
			defs[h] = b
		case strings.HasPrefix(p, "objects/"):
			key := strings.TrimPrefix(p, "objects/")
			if !strings.HasPrefix(key, outputsObjectPrefix(runID)) || path.Clean(key) != key {
				return nil, bad("%s is not a large output of run %s", p, runID)
			}
			if _, err := checkOutputObject(key, b); err != nil {
				return nil, bad("%s: %v", p, err)
			}
			objects[key] = b
		case strings.HasPrefix(p, "answers/"):
			key := strings.TrimSuffix(strings.TrimPrefix(p, "answers/"), ".json")
			if _, err := answerKey(key); err != nil || !json.Valid(b) {
				return nil, bad("%s is not an answer", p)
			}
			answers[key] = b
		case p == "records.jsonl":
			for i, line := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
				var rec exportRecord
				if err := json.Unmarshal([]byte(line), &rec); err != nil {
					return nil, bad("records.jsonl:%d: %v", i+1, err)
				}
				v, err := base64.StdEncoding.DecodeString(rec.Value)
				if err != nil {
					return nil, bad("records.jsonl:%d: %v", i+1, err)
				}
				switch {
				case strings.HasPrefix(rec.Key, histPrefix(runID)):
					var h HistoryRecord
					err = decodeMsgpack(v, &h)
				case strings.HasPrefix(rec.Key, outPrefix(runID)):
					var o outputRecord
					err = decodeMsgpack(v, &o)
				case strings.HasPrefix(rec.Key, childPrefix(runID)):
					continue // the children are not moved with it
				default:
					err = fmt.Errorf("key %s is not a record of run %s", rec.Key, runID)
				}
				if err != nil {
					return nil, bad("records.jsonl:%d: %v", i+1, err)
				}
				puts = append(puts, storage.KVWrite{Key: rec.Key, Value: v})
			}
		}
	}
	if len(puts) == 0 {
		return nil, bad("records.jsonl holds no record of run %s", runID)
	}
	return &runImport{runID: runID, defs: defs, objects: objects, answers: answers, puts: puts}, nil
}

func (it *Interpreter) importRun(ctx context.Context, imp *runImport) error {
	runID, defs, objects, answers, puts := imp.runID, imp.defs, imp.objects, imp.answers, imp.puts
	if _, err := it.rt.Inspector().Status(ctx, runID); err == nil {
		return fmt.Errorf("%w: this store already has a run %s", ErrRunIDReused, runID)
	} else if !errors.Is(err, runtime.ErrRunNotFound) {
		return err
	}
	if got, err := it.q.KVScan(ctx, histPrefix(runID), "", 1); err != nil {
		return err
	} else if len(got) > 0 {
		return fmt.Errorf("%w: this store already holds records of run %s", ErrRunIDReused, runID)
	}
	for h, src := range defs {
		if err := it.pins.pin(ctx, h, func() error { return putDefinition(ctx, it.store, h, src) }); err != nil {
			return err
		}
	}
	for k, b := range objects {
		if _, err := it.store.Put(ctx, k, b, objstore.PutOptions{}); err != nil {
			return fmt.Errorf("interpreter: import %s: %w", k, err)
		}
	}
	for k, b := range answers {
		if err := (answerStore{store: it.store, red: &redactor{}}).Put(ctx, k, b); err != nil {
			return err
		}
	}
	puts = append(puts, storage.KVWrite{Key: expireKey(it.now(), runID), Value: []byte{}})
	ok, err := it.q.KVApply(ctx, storage.KVBatch{Expect: []storage.KVWrite{{Key: puts[0].Key}}, Puts: puts})
	if err != nil {
		return fmt.Errorf("interpreter: import run %s: %w", runID, err)
	}
	if !ok {
		return fmt.Errorf("%w: run %s was imported meanwhile", ErrRunIDReused, runID)
	}
	return nil
}
