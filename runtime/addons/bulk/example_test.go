package bulk_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"

	"github.com/tqw-dsl/tqw/runtime"
	"github.com/tqw-dsl/tqw/runtime/addons/bulk"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/mem"
	"github.com/tqw-dsl/tqw/runtime/store/queue"
)

// A two-phase pipeline over three items, one of which fails.
func Example() {
	ctx := context.Background()
	store := mem.New()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	q, err := queue.Open(ctx, store, queue.Options{Logger: quiet})
	if err != nil {
		panic(err)
	}
	defer q.Close()
	pipe := bulk.Pipeline{Phases: []bulk.Phase{
		{Name: "summarize", Run: func(_ context.Context, pc *bulk.PhaseContext, in []byte) ([]byte, error) {
			if len(in) == 0 {
				return nil, runtime.Permanent(fmt.Errorf("empty document"))
			}
			pc.AddCost("tokens", int64(len(in)))
			return []byte(strings.ToUpper(string(in))), nil
		}},
		{Name: "encode", Run: func(_ context.Context, pc *bulk.PhaseContext, in []byte) ([]byte, error) {
			pc.AddCost("micro_usd", 5)
			return []byte(strconv.Quote(string(in))), nil
		}},
	}}
	r, err := bulk.New(q, store, pipe, bulk.WithLogger(quiet))
	if err != nil {
		panic(err)
	}
	w := r.Spawn(ctx)
	defer w.Shutdown(ctx)

	docs := [][]byte{[]byte("alpha"), []byte(""), []byte("gamma")}
	if _, err := r.Submit(ctx, "docs", docs, bulk.Threshold{MaxFailed: 2}); err != nil {
		panic(err)
	}
	p, err := r.Wait(ctx, "docs")
	if err != nil {
		panic(err)
	}
	fmt.Printf("succeeded %d, failed %d, tokens %d, micro_usd %d\n", p.Succeeded, p.Failed, p.Costs["tokens"], p.Costs["micro_usd"])
	if _, err := r.WriteResults(ctx, "docs", os.Stdout); err != nil {
		panic(err)
	}
	// Output:
	// succeeded 2, failed 1, tokens 10, micro_usd 10
	// {"index":0,"run_id":"docs.0","status":"succeeded","output":"ALPHA","costs":{"micro_usd":5,"tokens":5},"attempts":1}
	// {"index":1,"run_id":"docs.1","status":"failed","error":"phase summarize: empty document","attempts":1}
	// {"index":2,"run_id":"docs.2","status":"succeeded","output":"GAMMA","costs":{"micro_usd":5,"tokens":5},"attempts":1}
}
