package server

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/tqw-dsl/tqw/interpreter"
	"github.com/tqw-dsl/tqw/runtime"
	rtmemo "github.com/tqw-dsl/tqw/runtime/memo"
	"github.com/tqw-dsl/tqw/runtime/runstate"
	"github.com/tqw-dsl/tqw/server/wire"
)

// Moving runs between stores: GET /v1/runs/{id}/export answers the
// files of the folder 'tqw-dsl export' writes as one JSON document
// (wire.RunExport), and POST /v1/import takes such a document, checks
// all of it as 'tqw-dsl import' does and writes nothing when any part
// is refused.

// maxImportBody bounds an import's body: the files in base64, which
// the server holds in memory while it checks them.
var maxImportBody int64 = 64 << 20

func (s *Server) exportRun(w http.ResponseWriter, r *http.Request) {
	id, ok := runIDParam(w, r)
	if !ok {
		return
	}
	st, ok := s.status(w, r, id)
	if !ok {
		return
	}
	store := s.rt.Store()
	files, err := interpreter.ExportRun(r.Context(), interpreter.WithSealed(s.rt.Queue(), s.rt.Inspector()), store,
		rtmemo.NewStore(store, rtmemo.DefaultPrefix, runstate.ValidateRunID), st)
	if errors.Is(err, runtime.ErrRunNotFound) {
		writeError(w, http.StatusNotFound, "not_found", "id", err.Error())
		return
	}
	if err != nil {
		s.storeFailed(w, "exporting run "+id, err)
		return
	}
	writeJSON(w, http.StatusOK, wire.RunExport{RunID: id, Files: files})
}

func (s *Server) importRun(w http.ResponseWriter, r *http.Request) {
	var req wire.RunExport
	if !decodeBody(w, r, maxImportBody, &req) {
		return
	}
	runID, err := interpreter.CheckRunFolder(req.Files)
	if err != nil {
		writeError(w, http.StatusUnprocessableEntity, "damaged_export", "files", err.Error())
		return
	}
	if req.RunID != "" && req.RunID != runID {
		writeError(w, http.StatusUnprocessableEntity, "damaged_export", "run_id", fmt.Sprintf("run_id %q is not the run manifest.json holds (%q)", req.RunID, runID))
		return
	}
	dctx, cancel := s.durable(r)
	defer cancel()
	_, err = s.it.ImportRun(dctx, req.Files)
	switch {
	case errors.Is(err, interpreter.ErrDamagedExport):
		writeError(w, http.StatusUnprocessableEntity, "damaged_export", "files", err.Error())
	case errors.Is(err, interpreter.ErrRunIDReused):
		writeError(w, http.StatusConflict, "run_id_in_use", "run_id", err.Error())
	case err != nil:
		s.storeFailed(w, "importing run "+runID, err)
	default:
		writeJSON(w, http.StatusCreated, wire.ImportResponse{RunID: runID})
	}
}
