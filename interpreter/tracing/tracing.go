package tracing

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/tqw-dsl/tqw/internal/buildinfo"
)

// ErrUnsupportedExporter reports OTLP settings tracing cannot honor: a
// protocol other than OTLP over HTTP, or a traces exporter other than
// otlp or none.
var ErrUnsupportedExporter = errors.New("tracing: unsupported exporter setting")

// The variables FromEnv reads itself; the exporter and the SDK read the
// other OTEL_* variables (headers, timeout, service name, resource
// attributes, sampler, batching).
const (
	EnvEndpoint       = "OTEL_EXPORTER_OTLP_ENDPOINT"
	EnvTracesEndpoint = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
	EnvProtocol       = "OTEL_EXPORTER_OTLP_PROTOCOL"
	EnvTracesProtocol = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
	EnvSDKDisabled    = "OTEL_SDK_DISABLED"
	EnvTracesExporter = "OTEL_TRACES_EXPORTER"
)

// DefaultServiceName is service.name when neither Options nor the
// environment name the service.
const DefaultServiceName = "tqw"

// Options configure FromEnv.
type Options struct {
	// ServiceName is service.name unless OTEL_SERVICE_NAME or
	// OTEL_RESOURCE_ATTRIBUTES set it; "" means DefaultServiceName.
	ServiceName string
	// Logger receives export errors; nil discards them.
	Logger *slog.Logger
	// InstanceID is service.instance.id, telling apart the processes of
	// one service; "" means a random UUID per process.
	InstanceID string
	// Getenv reads the variables FromEnv decides on; nil means os.Getenv.
	// The exporter reads its own settings from the process environment.
	Getenv func(string) string
}

// Provider is the tracing of one process: on, with a TracerProvider
// exporting over OTLP/HTTP, or off. The zero value and a nil *Provider
// are off. Call Shutdown once, as the process ends.
type Provider struct {
	sdk *sdktrace.TracerProvider
}

// Enabled reports whether spans are exported.
func (p *Provider) Enabled() bool { return p != nil && p.sdk != nil }

// TracerProvider returns the provider to create spans with, or nil when
// tracing is off: the interpreter and the engine take nil as off and
// then create no span at all.
func (p *Provider) TracerProvider() trace.TracerProvider {
	if !p.Enabled() {
		return nil
	}
	return p.sdk
}

// Shutdown ends the exporting: the spans ended so far are sent, within
// ctx's deadline. It is a no-op when tracing is off.
func (p *Provider) Shutdown(ctx context.Context) error {
	if !p.Enabled() {
		return nil
	}
	if err := p.sdk.Shutdown(ctx); err != nil {
		return fmt.Errorf("tracing: flush the spans: %w", err)
	}
	return nil
}

// ServiceVersion is service.version: the binary's module version, as
// tqw-dsl --version prints it, with its VCS revision when the build has
// no version of its own ("(devel)"); "unknown" without build information.
func ServiceVersion() string {
	in, ok := buildinfo.Read()
	switch {
	case !ok:
		return "unknown"
	case in.Version != "" && in.Version != "(devel)":
		return in.Version
	case in.Revision != "":
		return in.Revision
	case in.Version != "":
		return in.Version
	}
	return "unknown"
}

func instanceID(id string) string {
	if id != "" {
		return id
	}
	return uuid.NewString()
}

// Propagator is the W3C trace context plus baggage propagator FromEnv
// installs globally and Transport injects with.
func Propagator() propagation.TextMapPropagator {
	return propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
}

// FromEnv returns the process's tracing as the standard OpenTelemetry
// variables configure it: on only when OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set, and neither
// OTEL_SDK_DISABLED=true nor OTEL_TRACES_EXPORTER=none says otherwise.
// Off, it builds nothing and starts no goroutine. On, it also installs
// the provider and Propagator as OpenTelemetry's globals, and routes the
// SDK's errors to opts.Logger.
func FromEnv(ctx context.Context, opts Options) (*Provider, error) {
	getenv := opts.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	if strings.EqualFold(strings.TrimSpace(getenv(EnvSDKDisabled)), "true") {
		return &Provider{}, nil
	}
	if getenv(EnvEndpoint) == "" && getenv(EnvTracesEndpoint) == "" {
		return &Provider{}, nil
	}
	switch exp := strings.TrimSpace(getenv(EnvTracesExporter)); exp {
	case "none":
		return &Provider{}, nil
	case "", "otlp":
	default:
		return nil, fmt.Errorf("%w: %s=%q; tqw exports traces over OTLP only: set it to otlp or none, or unset it", ErrUnsupportedExporter, EnvTracesExporter, exp)
	}
	name, proto := EnvTracesProtocol, getenv(EnvTracesProtocol)
	if proto == "" {
		name, proto = EnvProtocol, getenv(EnvProtocol)
	}
	switch proto {
	case "", "http/protobuf", "http/json":
	default:
		return nil, fmt.Errorf("%w: %s=%q; tqw exports OTLP over HTTP: set it to http/protobuf (or http/json) and point the endpoint at the collector's HTTP port (4318), or unset it", ErrUnsupportedExporter, name, proto)
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("tracing: the OTLP exporter: %w", err)
	}
	service := opts.ServiceName
	if service == "" {
		service = DefaultServiceName
	}
	// Later detectors win: the environment overrides the defaults.
	res, err := resource.New(ctx, resource.WithAttributes(attribute.String("service.name", service),
		attribute.String("service.version", ServiceVersion()), attribute.String("service.instance.id", instanceID(opts.InstanceID))),
		resource.WithTelemetrySDK(), resource.WithFromEnv())
	if err != nil {
		_ = exp.Shutdown(ctx)
		return nil, fmt.Errorf("tracing: the resource (OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES): %w", err)
	}
	sdk := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	log := opts.Logger
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		if log != nil {
			log.Warn("tracing: exporting spans failed", "err", err)
		}
	}))
	otel.SetTracerProvider(sdk)
	otel.SetTextMapPropagator(Propagator())
	return &Provider{sdk: sdk}, nil
}
