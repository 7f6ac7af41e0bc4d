package webhook_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/tqw-dsl/tqw/runtime"
	"github.com/tqw-dsl/tqw/runtime/addons/webhook"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/mem"
	"github.com/tqw-dsl/tqw/runtime/store/queue"
)

// A run that reports its end to a callback URL, signed.
func Example() {
	ctx := context.Background()
	secret := []byte("shared-secret")
	got := make(chan string, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var t int64
		fmt.Sscanf(r.Header.Get(webhook.HeaderSignature), "t=%d,", &t)
		valid := r.Header.Get(webhook.HeaderSignature) == webhook.Sign(secret, t, body)
		got <- fmt.Sprintf("%s %s signed=%v", r.Header.Get(webhook.HeaderRunID), r.Header.Get(webhook.HeaderRunStatus), valid)
	}))
	defer srv.Close()

	store := mem.New()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	q, err := queue.Open(ctx, store, queue.Options{Logger: quiet})
	if err != nil {
		panic(err)
	}
	defer q.Close()
	echo := runtime.StepRunnerFunc(func(_ context.Context, s *runtime.Step) (runtime.StepOutcome, error) {
		return runtime.Succeed([]byte(`{"ok":true}`)), nil
	})
	hook := webhook.New(webhook.Options{Timeout: 5 * time.Second, Secret: secret})
	rt, err := runtime.New(q, store, echo, runtime.Options{TerminalHook: hook, Logger: quiet})
	if err != nil {
		panic(err)
	}
	w := rt.Spawn(ctx)
	defer w.Shutdown(ctx)
	_, err = rt.Submit(ctx, runtime.RunSpec{RunID: "order-7", Headers: map[string]string{webhook.CallbackURLHeader: srv.URL}})
	if err != nil {
		panic(err)
	}
	fmt.Println(<-got)
	// Output:
	// order-7 succeeded signed=true
}
