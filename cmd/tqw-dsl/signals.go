package main

import (
	"context"
	"encoding/json"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/tqw-dsl/tqw/runtime/signal"

	"github.com/spf13/cobra"
)

func init() { commands = append(commands, newSignalsCmd) }

// retentionText is the default signal retention, for help texts.
var retentionText = fmt.Sprintf("%d days", int(signal.DefaultRetention/(24*time.Hour)))

// signalJSON is a buffered signal as --json prints it.
type signalJSON struct {
	Key        string     `json:"key"`
	Size       int        `json:"size"`
	BufferedAt *time.Time `json:"buffered_at,omitempty"`
	// AgeSeconds is how long it has been buffered (absent when unknown).
	AgeSeconds *float64 `json:"age_seconds,omitempty"`
}

func newSignalsCmd() *cobra.Command {
	var (
		store  string
		asJSON bool
		limit  int
	)
	cmd := &cobra.Command{
		Use:   "signals",
		Short: "List buffered signals: sent while no step waited on their key (read-only)",
		Long: `signals lists the signals buffered in the store, by key: each was sent while
no step waited on its key and is delivered to the next step that waits on
it (one per key, the latest wins). A buffered signal is kept for the
writer's signal retention (` + retentionText + ` by default), counted from when it was
buffered, then the worker drops it. Payloads are not shown, only their
size.

It never opens the store as its writer, so it works while a worker (or run)
holds the store and does not disturb it; it shows what that writer has made
durable.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if limit < 1 {
				return failf(exitUsage, "--limit %d: want at least 1", limit)
			}
			ctx := context.WithoutCancel(cmd.Context())
			v, err := openView(ctx, store)
			if err != nil {
				return err
			}
			defer v.Close()
			var sigs []signal.Info
			after := ""
			for len(sigs) < limit {
				want := min(limit-len(sigs), 1000)
				page, err := v.insp.ListSignals(ctx, signal.ListOptions{After: after, Limit: want})
				if err != nil {
					return failf(exitFailed, "list buffered signals: %v", err)
				}
				sigs = append(sigs, page...)
				if len(page) < want {
					break
				}
				after = page[len(page)-1].Key
			}
			now := time.Now()
			out := cmd.OutOrStdout()
			if asJSON {
				enc := json.NewEncoder(out)
				for _, s := range sigs {
					j := signalJSON{Key: s.Key, Size: s.Size}
					if !s.BufferedAt.IsZero() {
						at, age := s.BufferedAt.UTC(), now.Sub(s.BufferedAt).Seconds()
						j.BufferedAt, j.AgeSeconds = &at, &age
					}
					if err := enc.Encode(j); err != nil {
						return failf(exitFailed, "writing output: %v", err)
					}
				}
				return nil
			}
			tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "KEY\tSIZE\tAGE\tBUFFERED")
			for _, s := range sigs {
				age, at := "?", "unknown"
				if !s.BufferedAt.IsZero() {
					age, at = humanAge(now.Sub(s.BufferedAt)), s.BufferedAt.UTC().Format(time.RFC3339)
				}
				fmt.Fprintf(tw, "%s\t%d\t%s\t%s\n", s.Key, s.Size, age, at)
			}
			return tw.Flush()
		},
	}
	cmd.AddCommand(newSignalsClearCmd())
	addStoreFlag(cmd, &store)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object per signal: key, size, buffered_at, age_seconds")
	cmd.Flags().IntVar(&limit, "limit", 1000, "list at most this many signals")
	return cmd
}

// humanAge renders d in its two largest units: 45s, 3m20s, 5h12m, 2d3h.
func humanAge(d time.Duration) string {
	d = max(d, 0).Round(time.Second)
	switch {
	case d < time.Minute:
		return d.String()
	case d < time.Hour:
		return fmt.Sprintf("%dm%ds", d/time.Minute, d%time.Minute/time.Second)
	case d < 24*time.Hour:
		return fmt.Sprintf("%dh%dm", d/time.Hour, d%time.Hour/time.Minute)
	}
	return fmt.Sprintf("%dd%dh", d/(24*time.Hour), d%(24*time.Hour)/time.Hour)
}
