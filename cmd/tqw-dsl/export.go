package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"

	"github.com/spf13/cobra"

	"github.com/tqw-dsl/tqw/interpreter"
	rtmemo "github.com/tqw-dsl/tqw/runtime/memo"
	"github.com/tqw-dsl/tqw/runtime/runstate"
)

func init() { commands = append(commands, newExportCmd, newImportCmd) }

// maxImportBytes bounds what import reads from a folder.
const maxImportBytes = 1 << 30

func newExportCmd() *cobra.Command {
	var store string
	cmd := &cobra.Command{
		Use:   "export RUN DIR",
		Short: "Write a run as a portable folder (read-only)",
		Long: `export writes RUN, live or finished (sealed too), into the new folder DIR:
manifest.json (the run, its status and the SHA-256 of every other file),
definitions/ (the pinned workflow YAML), input.json, history.json, the
records of its history and outputs (records.jsonl), its large outputs
(objects/) and the llm answers its memo holds (answers/). Secrets are
absent, as in every record. 'tqw-dsl import DIR' reads it into another
store, where it can be inspected (history, diff) and forked.

DIR must not exist; it is written under a temporary name and renamed, so a
killed export leaves no half folder under DIR. It only reads the store.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			runID, dir := args[0], args[1]
			if err := runstate.ValidateRunID(runID); err != nil {
				return failf(exitUsage, "%v", err)
			}
			if _, err := os.Lstat(dir); err == nil {
				return failf(exitUsage, "%s exists; export writes a new folder", dir)
			}
			ctx := context.WithoutCancel(cmd.Context())
			v, err := openView(ctx, store)
			if err != nil {
				return err
			}
			defer v.Close()
			st, err := v.status(ctx, store, runID)
			if err != nil {
				return err
			}
			files, err := interpreter.ExportRun(ctx, v.records(), v.store, rtmemo.NewStore(v.store, rtmemo.DefaultPrefix, runstate.ValidateRunID), st)
			if err != nil {
				return failf(exitFailed, "export run %s: %v", runID, err)
			}
			tmp, err := os.MkdirTemp(filepath.Dir(filepath.Clean(dir)), "."+filepath.Base(dir)+".export-")
			if err != nil {
				return failf(exitFailed, "export: %v", err)
			}
			defer os.RemoveAll(tmp)
			for p, b := range files {
				path := filepath.Join(tmp, filepath.FromSlash(p))
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					return failf(exitFailed, "export: %v", err)
				}
				if err := os.WriteFile(path, b, 0o644); err != nil {
					return failf(exitFailed, "export: %v", err)
				}
			}
			if err := os.Rename(tmp, dir); err != nil {
				return failf(exitFailed, "export: %v", err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "run %s exported to %s (%s)\n", runID, dir, plural(len(files), "file"))
			return nil
		},
	}
	addStoreFlag(cmd, &store)
	return cmd
}

func newImportCmd() *cobra.Command {
	var store string
	cmd := &cobra.Command{
		Use:   "import DIR",
		Short: "Read a run exported with 'tqw-dsl export' into this store",
		Long: `import checks the folder DIR that 'tqw-dsl export' wrote (every file against
the SHA-256 manifest.json records, every record decoded, nothing out of
place) and writes the run into the store: its definitions, large outputs
and answers, then its records in one commit. A damaged or altered folder,
or a store that already has a run of that id, is refused (exit 2) and
nothing is written. The imported run's history can then be read (history,
diff) and forked (fork); no worker ran it here, so list does not show it
and status says it is an imported copy. Its records expire with the store's retention, counted from
the import.

import opens the store as its writer; it refuses while a worker holds it.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := refuseMem(store, "import"); err != nil {
				return err
			}
			files, err := readFolder(args[0])
			if err != nil {
				return err
			}
			if _, err := interpreter.CheckRunFolder(files); err != nil {
				return failf(exitUsage, "import %s refused: %v", args[0], err)
			}
			ctx := context.WithoutCancel(cmd.Context())
			s, err := openSession(ctx, store, engineOptions{name: "import", brief: true})
			if err != nil {
				return err
			}
			defer s.Close()
			if s.e == nil {
				return failf(exitFailed, "%s is held by a live writer (%s); import writes the store directly: run it when no worker holds the store", store, s.holder.Owner)
			}
			runID, err := s.e.it.ImportRun(ctx, files)
			if errors.Is(err, interpreter.ErrDamagedExport) || errors.Is(err, interpreter.ErrRunIDReused) {
				return failf(exitUsage, "import %s refused: %v", args[0], err)
			}
			if err != nil {
				return failf(exitFailed, "import %s: %v", args[0], err)
			}
			if err := s.Close(); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "run %s imported\n", runID)
			return nil
		},
	}
	addStoreFlag(cmd, &store)
	return cmd
}

// readFolder reads every regular file under dir by slash path, refusing
// links and anything over maxImportBytes in all.
func readFolder(dir string) (map[string][]byte, error) {
	files := map[string][]byte{}
	var total int64
	var paths []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		if !d.Type().IsRegular() {
			return fmt.Errorf("%s is not a regular file", path)
		}
		paths = append(paths, path)
		return nil
	})
	if err != nil {
		return nil, failf(exitUsage, "import: %v", err)
	}
	sort.Strings(paths)
	for _, path := range paths {
		info, err := os.Lstat(path)
		if err != nil {
			return nil, failf(exitUsage, "import: %v", err)
		}
		if total += info.Size(); total > maxImportBytes {
			return nil, failf(exitUsage, "import: %s holds more than %d bytes", dir, maxImportBytes)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, failf(exitUsage, "import: %v", err)
		}
		rel, _ := filepath.Rel(dir, path)
		files[filepath.ToSlash(rel)] = b
	}
	if files["manifest.json"] == nil {
		return nil, failf(exitUsage, "import: %s has no manifest.json: not a folder 'tqw-dsl export' wrote", dir)
	}
	return files, nil
}
