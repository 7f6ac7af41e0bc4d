package main

import (
	"fmt"
	"io"
	goruntime "runtime"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"

	"github.com/tqw-dsl/tqw/actions/llm"
	"github.com/tqw-dsl/tqw/actions/shell"
	"github.com/tqw-dsl/tqw/internal/buildinfo"
	"github.com/tqw-dsl/tqw/interpreter/tracing"
	"github.com/tqw-dsl/tqw/runtime/lease"
)

// Exit codes. One table holds for every command (exitCodes); README's
// table must match it (TestHelpTablesMatchREADME).
const (
	exitOK          = 0
	exitFailed      = 1 // the operation failed
	exitInvalid     = 1 // validate, graph or eval found an error: the operation's answer is "no"
	exitUsage       = 2 // the command as given cannot run; nothing was done
	exitCancelled   = 3 // the run was cancelled
	exitInterrupted = 130
)

// exitCode is one row of the exit-code table.
type exitCode struct {
	code    int
	meaning string
}

// exitCodes is the exit-code table every command follows, as the root
// --help prints it.
//
// The rule between 1 and 2: 2 means the command line itself cannot work
// (fix the command, then run it again) and nothing was done; 1 means the
// command ran and the answer is a failure. run and submit refuse an
// invalid workflow or input before touching the store, so for them it is
// a usage error (2), like a bad flag, as kubectl apply refuses a manifest
// that does not validate before sending it; validate, graph and eval
// exist to examine a workflow or an expression, so an error in it is
// their finding (1), as actionlint and go vet report theirs. A store that
// cannot be reached or read is a failure (1), never a usage error; a
// store URL that cannot name a store is a usage error (2).
var exitCodes = []exitCode{
	{exitOK, "success: the run succeeded, the files are valid, the command was applied"},
	{exitFailed, "the command ran and failed: the run failed; validate found an error in a file (a file it cannot read included), test a failing case, graph or eval one in the workflow or expression; no such run; the store does not exist, cannot be reached or is damaged; a command sent to the store's live writer failed or got no answer"},
	{exitUsage, "usage error, and nothing was done: an unknown command or flag, a wrong or missing argument, a file or JSON value given on the command line that cannot be read, an invalid workflow or input given to run or submit, a test file (or the workflow it tests) that does not load, a signal payload the waiting step's schema refuses, a store URL that names no store (or s3:// without credentials), a mem:// store for a run that must outlive the process (submit, run --detach), store truncate without --yes, an OTLP exporter setting tracing cannot honor (grpc)"},
	{exitCancelled, "the run was cancelled (run)"},
	{exitInterrupted, "run was interrupted by SIGINT or SIGTERM before the run ended; the run continues with the store's next worker or run (a worker stopped so exits 0)"},
}

// How tqw-dsl comes to read an environment variable.
const (
	readByName       = iota // the code reads it by name (os.Getenv("NAME"))
	readAsSecret            // read as a workflow's secret (the interpreter's getenv)
	readInherited           // passed on to shell commands (the shell action's LookupEnv)
	readByGo                // read by Go's standard library
	readAsHookSecret        // named by a --hooks file (serve's webhooks)
	readByOTel              // read by the OpenTelemetry SDK and exporter, with tracing on
)

// envVar is one row of the environment table: variables that share a
// meaning.
type envVar struct {
	names   []string
	meaning string
	how     int
}

// dynamicReaders are the packages that read variables whose names are
// only known at run time, and how (TestEnvTableCoversTheCode).
var dynamicReaders = map[string]int{
	"github.com/tqw-dsl/tqw/interpreter":        readAsSecret,
	"github.com/tqw-dsl/tqw/interpreter/wftest": readAsSecret,
	"github.com/tqw-dsl/tqw/actions/shell":      readInherited,
	"github.com/tqw-dsl/tqw/server":             readAsHookSecret,
}

// hookSecretPlaceholder stands for the names a --hooks file gives as secret_env.
const hookSecretPlaceholder = "<hook secret>"

// secretPlaceholder stands for the names a workflow lists under secrets:.
const secretPlaceholder = "<secret>"

// envVars lists every environment variable tqw-dsl reads, as the root
// --help prints it; README's table must match it, and the variables the
// code reads must match it (TestEnvTableCoversTheCode).
var envVars = []envVar{
	{[]string{"TQW_STORE"}, "the store URL of every command that takes --store, when --store is not given (default " + defaultStore + ")", readByName},
	{[]string{"TQW_LOG"}, "debug or info: log more to stderr (default: warnings and errors only)", readByName},
	{[]string{leaseTTLEnv}, fmt.Sprintf("the writer lease's TTL on stores without a file lock (s3://), a duration from 100ms to %v (default %v)", lease.MaxTTL, lease.DefaultTTL), readByName},
	{[]string{apiTokenEnv}, "the HTTP API's bearer token, at least 16 bytes: serve requires it on the API when set (or --token-file); signal, cancel, submit, status, list and history send it to a serving writer", readByName},
	{[]string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"}, "the credentials of s3:// stores (both are required)", readByName},
	{[]string{"OPENAI_BASE_URL"}, "the llm action's API base URL when a step gives no base_url (default " + llm.DefaultBaseURL + ")", readByName},
	{[]string{llm.DefaultAPIKeySecret}, "the llm action's API key when a step gives no api_key_secret; read only when the workflow lists it under secrets:", readAsSecret},
	{[]string{secretPlaceholder}, "every variable a workflow lists under secrets:, read by the process that runs its steps (run or worker; test --allow-real, when a case sets none) and redacted from outputs, history and errors", readAsSecret},
	{[]string{hookSecretPlaceholder}, "every variable a --hooks file names as secret_env: the webhooks' HMAC secrets and bearer tokens, read by serve when it starts", readAsHookSecret},
	{shell.DefaultInherit, "passed on to the shell action's commands, the only variables of the worker's environment they see (a step's env: adds others)", readInherited},
	{[]string{"HTTPS_PROXY", "HTTP_PROXY", "NO_PROXY"}, "proxies of the http and llm actions and of s3:// stores (read by Go's net/http, also in lower case)", readByGo},
	{[]string{tracing.EnvEndpoint, tracing.EnvTracesEndpoint}, "turn OpenTelemetry tracing on: the OTLP/HTTP endpoint the spans of runs, steps and the http and llm actions' requests go to, from run, worker, serve and every command that works the store; unset, nothing is traced", readByName},
	{[]string{tracing.EnvSDKDisabled, tracing.EnvTracesExporter}, "true, or none: tracing stays off although an endpoint is set; an exporter other than otlp is a usage error", readByName},
	{[]string{tracing.EnvProtocol, tracing.EnvTracesProtocol}, "http/protobuf (the default) or http/json; grpc is a usage error, as tqw exports OTLP over HTTP only", readByName},
	{[]string{"OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES", "OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TIMEOUT", "OTEL_TRACES_SAMPLER"}, "with tracing on, read by the OpenTelemetry SDK: the service name (default tqw-dsl), resource attributes, the exporter's headers and timeout (also their _TRACES_ forms, with compression and TLS), the sampler (and OTEL_BSP_* batching)", readByOTel},
	{[]string{"TQW_SHELL_SUPERVISOR"}, "set by tqw-dsl on the process that supervises a shell command (tqw-dsl's own binary); never set it yourself", readByName},
}

// helpWidth is the width the root --help wraps its tables to.
const helpWidth = 80

// writeRootHelpTables prints the exit-code and environment tables.
func writeRootHelpTables(w io.Writer) {
	fmt.Fprintln(w, "\nExit codes (the same for every command):")
	for _, e := range exitCodes {
		writeWrapped(w, fmt.Sprintf("  %-4d", e.code), e.meaning)
	}
	fmt.Fprintln(w, "\nEnvironment variables:")
	for _, v := range envVars {
		fmt.Fprintf(w, "  %s\n", strings.Join(v.names, ", "))
		writeWrapped(w, "", v.meaning)
	}
}

// writeWrapped prints text wrapped to helpWidth, indented by 6 columns,
// the first line after head (at most 6 columns).
func writeWrapped(w io.Writer, head, text string) {
	const indent = "      "
	line := head + indent[len(head):]
	n := len(line)
	for i, word := range strings.Fields(text) {
		if i > 0 && n+1+len(word) > helpWidth {
			fmt.Fprintln(w, line)
			line, n = indent+word, len(indent)+len(word)
			continue
		}
		if i > 0 {
			line += " "
			n++
		}
		line += word
		n += len(word)
	}
	fmt.Fprintln(w, line)
}

// rootHelpFooter is what every command's --help ends with.
const rootHelpFooter = "\nExit codes and environment variables: see 'tqw-dsl --help'."

// installHelp makes the root --help end with the exit-code and
// environment tables and every other command's with rootHelpFooter.
func installHelp(root *cobra.Command) {
	base := root.HelpFunc()
	root.SetHelpFunc(func(c *cobra.Command, args []string) {
		base(c, args)
		if c.HasParent() {
			fmt.Fprintln(c.OutOrStdout(), rootHelpFooter)
			return
		}
		writeRootHelpTables(c.OutOrStdout())
	})
}

// versionText is what --version prints: the module version, the VCS
// revision, its time and whether the tree had uncommitted changes, and
// the Go toolchain, from the build information of the binary.
func versionText(bi *debug.BuildInfo, ok bool) string {
	if !ok {
		return "tqw-dsl (unknown version): the binary carries no build information\n"
	}
	var b strings.Builder
	in := buildinfo.From(bi)
	version := in.Version
	if version == "" {
		version = "(unknown version)"
	}
	fmt.Fprintf(&b, "tqw-dsl %s (module %s)\n", version, in.Path)
	if in.Revision != "" {
		fmt.Fprintf(&b, "revision %s", in.Revision)
		if in.Time != "" {
			fmt.Fprintf(&b, " (%s)", in.Time)
		}
		if in.Modified {
			b.WriteString(", with uncommitted changes")
		}
		b.WriteString("\n")
	} else {
		b.WriteString("revision unknown: built without version control information (go run, go test, or -buildvcs=false)\n")
	}
	fmt.Fprintf(&b, "%s %s/%s\n", in.GoVersion, goruntime.GOOS, goruntime.GOARCH)
	return b.String()
}
