package jobs_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/tqw-dsl/tqw/runtime/addons/jobs"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/mem"
	"github.com/tqw-dsl/tqw/runtime/store/queue"
)

// SendEmail is a typed job: its fields are the input, its Run the work.
type SendEmail struct {
	To string `json:"to"`
}

func (SendEmail) JobName() string { return "email.send" }

// IdempotencyKey makes a second submission for the same address the same job.
func (e SendEmail) IdempotencyKey() string { return e.To }

func (e SendEmail) Run(_ context.Context, jc jobs.JobContext) (string, error) {
	return "msg-for-" + strings.ToLower(e.To), nil
}

func Example() {
	ctx := context.Background()
	store := mem.New()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	q, err := queue.Open(ctx, store, queue.Options{Logger: quiet})
	if err != nil {
		panic(err)
	}
	defer q.Close()
	r, err := jobs.New(q, store, jobs.WithLogger(quiet))
	if err != nil {
		panic(err)
	}
	if err := jobs.Register[SendEmail](r); err != nil {
		panic(err)
	}
	w := r.Spawn(ctx)
	defer w.Shutdown(ctx)

	h, err := jobs.Submit(ctx, r, SendEmail{To: "Ann@example.com"})
	if err != nil {
		panic(err)
	}
	id, err := h.Await(ctx)
	fmt.Println(h.ID, id, err)

	// The same key after completion: the stored result, no second run.
	again, _ := jobs.Submit(ctx, r, SendEmail{To: "Ann@example.com"})
	id, err = again.FetchResult(ctx)
	fmt.Println(again.Deduplicated, id, err)
	// Output:
	// email.send:Ann@example.com msg-for-ann@example.com <nil>
	// true msg-for-ann@example.com <nil>
}
