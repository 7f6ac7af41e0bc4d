package server

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/tqw-dsl/tqw/dsl"
	"github.com/tqw-dsl/tqw/schemas"
	"github.com/tqw-dsl/tqw/server/wire"
)

func (s *Server) listWorkflows(w http.ResponseWriter, r *http.Request) {
	out := wire.WorkflowList{Workflows: []wire.WorkflowInfo{}}
	if s.cfg.WorkflowsDir == "" {
		writeJSON(w, http.StatusOK, out)
		return
	}
	root, err := os.OpenRoot(s.cfg.WorkflowsDir)
	var entries []os.DirEntry
	if err == nil {
		defer root.Close()
		entries, err = fs.ReadDir(root.FS(), ".")
	}
	if err != nil {
		writeError(w, http.StatusInternalServerError, "internal", "", fmt.Sprintf("reading the workflows folder: %v", err))
		return
	}
	for _, e := range entries {
		if !e.Type().IsRegular() || strings.HasPrefix(e.Name(), ".") || !isWorkflowFile(e.Name()) {
			continue
		}
		info := wire.WorkflowInfo{Name: e.Name()}
		wf, diags, err := loadIn(root, s.cfg.WorkflowsDir, e.Name(), s.cfg.DSL)
		switch {
		case err == nil:
			info.Valid, info.Workflow, info.Description, info.Steps = true, wf.Name, wf.Description, len(wf.Steps)
		case errors.Is(err, dsl.ErrInvalid):
			info.Error = strings.TrimSpace(diags.Errors().String())
		default:
			info.Error = err.Error()
		}
		out.Workflows = append(out.Workflows, info)
	}
	sort.Slice(out.Workflows, func(i, j int) bool { return out.Workflows[i].Name < out.Workflows[j].Name })
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) getWorkflow(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if _, ok := s.workflowPath(w, name, "name"); !ok {
		return
	}
	root, err := os.OpenRoot(s.cfg.WorkflowsDir)
	if err != nil {
		writeError(w, http.StatusInternalServerError, "internal", "", fmt.Sprintf("reading the workflows folder: %v", err))
		return
	}
	defer root.Close()
	wf, diags, err := loadIn(root, s.cfg.WorkflowsDir, name, s.cfg.DSL)
	if err != nil {
		if errors.Is(err, dsl.ErrInvalid) {
			// The file is at fault, not the request: no field; the
			// diagnostics say where.
			writeJSON(w, http.StatusUnprocessableEntity, wire.Error{Error: wire.ErrorBody{Code: "invalid_workflow",
				Message: fmt.Sprintf("%s is not a valid workflow: %s", name, strings.TrimSpace(diags.Errors().String())), Diagnostics: wireDiagnostics(diags)}})
			return
		}
		writeError(w, http.StatusInternalServerError, "internal", "", err.Error())
		return
	}
	var b strings.Builder
	if err := wf.WriteMermaid(&b); err != nil {
		writeError(w, http.StatusInternalServerError, "internal", "", "drawing the graph: "+err.Error())
		return
	}
	writeJSON(w, http.StatusOK, wire.WorkflowDetail{Name: name, YAML: string(wf.Source), Mermaid: b.String(), Title: wf.Name, Description: wf.Description})
}

// loadIn reads the file name of root (the folder dir) as the loader
// does (dsl.ReadFile: a regular file inside the folder) and parses it.
func loadIn(root *os.Root, dir, name string, opts dsl.Options) (*dsl.Workflow, dsl.Diagnostics, error) {
	src, _, err := dsl.ReadFile(root, name, opts.Limits)
	if err != nil {
		return nil, nil, err
	}
	return dsl.ParseWith(filepath.Join(dir, name), src, opts)
}

func (s *Server) validate(w http.ResponseWriter, r *http.Request) {
	limit := int64(dsl.DefaultLimits.MaxFileBytes)
	// One byte past the bound, so the loader reports file.too-large.
	src, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
	if err != nil {
		writeError(w, http.StatusBadRequest, "bad_request", "", "reading the request body: "+err.Error())
		return
	}
	name := r.URL.Query().Get("filename")
	if name == "" {
		name = "<request>"
	}
	wf, diags, err := dsl.ParseWith(name, src, s.cfg.DSL)
	if err != nil && !errors.Is(err, dsl.ErrInvalid) {
		writeError(w, http.StatusInternalServerError, "internal", "", err.Error())
		return
	}
	rep := wire.ValidateReport{File: name, Valid: wf != nil, Diagnostics: wireDiagnostics(diags)}
	if wf != nil {
		rep.Hash = wf.Hash
	}
	writeJSON(w, http.StatusOK, rep)
}

func (s *Server) schema(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/schema+json")
	_, _ = w.Write(schemas.WorkflowJSON)
}
