package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"

	"github.com/tqw-dsl/tqw/server/wire"
)

// The bodies of the recovery endpoints (package wire documents them).
type (
	RetryRequest        = wire.RetryRequest
	SkipRequest         = wire.SkipRequest
	RecoverResponse     = wire.RecoverResponse
	BulkRequest         = wire.BulkRequest
	BulkRun             = wire.BulkRun
	BulkResponse        = wire.BulkResponse
	ClearSignalResponse = wire.ClearSignalResponse
	RunExport           = wire.RunExport
	ImportResponse      = wire.ImportResponse
)

// Retry redrives a failed or cancelled run in place; req may name a new
// revision of its workflow (zero: the one it ran). A refusal is an
// *Error: 409 not_redrivable, 422 incompatible_definition.
func (c *Client) Retry(ctx context.Context, id string, req RetryRequest) (RecoverResponse, error) {
	return c.recover(ctx, "/v1/runs/"+url.PathEscape(id)+"/retry", req)
}

// Skip records the step a failed run ended at as done with output (JSON;
// nil is null) and continues the run after it.
func (c *Client) Skip(ctx context.Context, id, step string, output []byte) (RecoverResponse, error) {
	return c.recover(ctx, "/v1/runs/"+url.PathEscape(id)+"/skip", SkipRequest{Step: step, Output: output})
}

func (c *Client) recover(ctx context.Context, path string, body any) (RecoverResponse, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return RecoverResponse{}, fmt.Errorf("client: %w", err)
	}
	var out RecoverResponse
	_, err = c.do(ctx, http.MethodPost, path, bytes.NewReader(b), "application/json", &out)
	return out, err
}

// Bulk applies req.Action to every run filter selects (its Limit and
// Descending must be zero; req.Apply false is a dry run).
func (c *Client) Bulk(ctx context.Context, filter ListOptions, req BulkRequest) (BulkResponse, error) {
	if filter.Limit != 0 || filter.Descending {
		return BulkResponse{}, fmt.Errorf("client: Bulk takes every run the filter selects: leave Limit and Descending zero")
	}
	b, err := json.Marshal(req)
	if err != nil {
		return BulkResponse{}, fmt.Errorf("client: %w", err)
	}
	path := "/v1/bulk"
	if q := filter.query(); len(q) > 0 {
		path += "?" + q.Encode()
	}
	var out BulkResponse
	_, err = c.do(ctx, http.MethodPost, path, bytes.NewReader(b), "application/json", &out)
	return out, err
}

// ClearSignal discards the signal buffered under key; Cleared is false
// when none was.
func (c *Client) ClearSignal(ctx context.Context, key string) (ClearSignalResponse, error) {
	var out ClearSignalResponse
	_, err := c.do(ctx, http.MethodDelete, "/v1/signals/"+url.PathEscape(key), nil, "", &out)
	return out, err
}

// Export returns run id as the files of the folder 'tqw-dsl export'
// writes (path: bytes).
func (c *Client) Export(ctx context.Context, id string) (RunExport, error) {
	var out RunExport
	_, err := c.do(ctx, http.MethodGet, "/v1/runs/"+url.PathEscape(id)+"/export", nil, "", &out)
	return out, err
}

// Import writes an exported run into the server's store. A damaged or
// altered folder is an *Error 422 damaged_export, a run id the store
// holds already 409 run_id_in_use; either writes nothing.
func (c *Client) Import(ctx context.Context, ex RunExport) (ImportResponse, error) {
	b, err := json.Marshal(ex)
	if err != nil {
		return ImportResponse{}, fmt.Errorf("client: %w", err)
	}
	var out ImportResponse
	_, err = c.do(ctx, http.MethodPost, "/v1/import", bytes.NewReader(b), "application/json", &out)
	return out, err
}
