// The OTLP receiver: gRPC (opentelemetry.proto.collector.trace.v1.TraceService)
// and HTTP (POST /v1/traces, protobuf or JSON, optionally gzip).

package otlp

import (
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	_ "google.golang.org/grpc/encoding/gzip" // the Collector's otlp exporter compresses with gzip by default
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
)

// TracesPath is the OTLP/HTTP traces path.
const TracesPath = "/v1/traces"

// Receiver listens for OTLP exports and hands their spans to an Assembler.
type Receiver struct {
	asm      *Assembler
	grpcSrv  *grpc.Server
	grpcLn   net.Listener
	httpSrv  *http.Server
	httpLn   net.Listener
	served   chan error
	nServing int
}

// Listen opens the listeners cfg names (at least one) for asm. Serve
// starts answering.
func Listen(cfg Config, asm *Assembler) (*Receiver, error) {
	if cfg.GRPCAddr == "" && cfg.HTTPAddr == "" {
		return nil, errors.New("otlp: no listen address (want a gRPC or an HTTP address)")
	}
	r := &Receiver{asm: asm, served: make(chan error, 2)}
	if cfg.GRPCAddr != "" {
		ln, err := net.Listen("tcp", cfg.GRPCAddr)
		if err != nil {
			return nil, fmt.Errorf("otlp gRPC: %w", err)
		}
		r.grpcLn = ln
		r.grpcSrv = grpc.NewServer(grpc.MaxRecvMsgSize(MaxRequestBytes))
		ptraceotlp.RegisterGRPCServer(r.grpcSrv, &grpcTraces{r: r})
	}
	if cfg.HTTPAddr != "" {
		ln, err := net.Listen("tcp", cfg.HTTPAddr)
		if err != nil {
			if r.grpcLn != nil {
				r.grpcLn.Close()
			}
			return nil, fmt.Errorf("otlp HTTP: %w", err)
		}
		r.httpLn = ln
		mux := http.NewServeMux()
		mux.HandleFunc(TracesPath, r.serveHTTP)
		r.httpSrv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, MaxHeaderBytes: 64 << 10}
	}
	return r, nil
}

// GRPCAddr and HTTPAddr are the addresses listened on ("" when not).
func (r *Receiver) GRPCAddr() string { return addrString(r.grpcLn) }
func (r *Receiver) HTTPAddr() string { return addrString(r.httpLn) }

func addrString(ln net.Listener) string {
	if ln == nil {
		return ""
	}
	return ln.Addr().String()
}

// Serve answers exports in the background; a listener that fails is
// reported by Close.
func (r *Receiver) Serve() {
	if r.grpcSrv != nil {
		r.nServing++
		go func() { r.served <- r.grpcSrv.Serve(r.grpcLn) }()
	}
	if r.httpSrv != nil {
		r.nServing++
		go func() {
			err := r.httpSrv.Serve(r.httpLn)
			if errors.Is(err, http.ErrServerClosed) {
				err = nil
			}
			r.served <- err
		}()
	}
}

// Close stops accepting exports and waits, until ctx ends, for the
// exports being answered; past ctx it closes the connections still open.
// Handlers may still run after that (a body still arriving): the caller
// stops the assembler before flushing it, so that none is acknowledged and
// then lost.
func (r *Receiver) Close(ctx context.Context) error {
	var errs []error
	if r.httpSrv != nil {
		if err := r.httpSrv.Shutdown(ctx); err != nil {
			errs = append(errs, err)
			r.httpSrv.Close()
		}
	}
	if r.grpcSrv != nil {
		done := make(chan struct{})
		go func() { r.grpcSrv.GracefulStop(); close(done) }()
		select {
		case <-done:
		case <-ctx.Done():
			r.grpcSrv.Stop()
		}
	}
	for ; r.nServing > 0; r.nServing-- {
		if err := <-r.served; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

type grpcTraces struct {
	ptraceotlp.UnimplementedGRPCServer
	r *Receiver
}

// Export buffers the spans or, when the buffer is full, answers
// UNAVAILABLE with a retry delay: OTLP's retryable answer, so the exporter
// keeps the data and sends it again.
func (g *grpcTraces) Export(_ context.Context, req ptraceotlp.ExportRequest) (ptraceotlp.ExportResponse, error) {
	rejected, err := g.r.asm.Consume(req.Traces(), time.Now())
	if err != nil {
		st := status.New(codes.Unavailable, err.Error())
		if d, derr := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(RetryAfter)}); derr == nil {
			st = d
		}
		return ptraceotlp.NewExportResponse(), st.Err()
	}
	return exportResponse(rejected), nil
}

// exportResponse is a successful export's answer: a partial success when
// some spans were rejected (without a trace or span id), as OTLP wants.
func exportResponse(rejected int) ptraceotlp.ExportResponse {
	resp := ptraceotlp.NewExportResponse()
	if rejected > 0 {
		ps := resp.PartialSuccess()
		ps.SetRejectedSpans(int64(rejected))
		ps.SetErrorMessage(fmt.Sprintf("%d span(s) without a trace id or span id rejected", rejected))
	}
	return resp
}

// serveHTTP is OTLP/HTTP: the request's encoding is the answer's.
func (r *Receiver) serveHTTP(w http.ResponseWriter, req *http.Request) {
	ct, _, _ := strings.Cut(req.Header.Get("Content-Type"), ";")
	ct = strings.TrimSpace(strings.ToLower(ct))
	if req.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		httpStatus(w, ct, http.StatusMethodNotAllowed, "OTLP traces are POSTed")
		return
	}
	if ct != "application/x-protobuf" && ct != "application/json" {
		httpStatus(w, ct, http.StatusUnsupportedMediaType, fmt.Sprintf("content type %q: want application/x-protobuf or application/json", ct))
		return
	}
	var body io.Reader = http.MaxBytesReader(w, req.Body, MaxRequestBytes)
	switch enc := strings.ToLower(req.Header.Get("Content-Encoding")); enc {
	case "", "identity":
	case "gzip":
		zr, err := gzip.NewReader(body)
		if err != nil {
			httpStatus(w, ct, http.StatusBadRequest, "gzip body: "+err.Error())
			return
		}
		body = io.LimitReader(zr, MaxRequestBytes+1)
	default:
		httpStatus(w, ct, http.StatusUnsupportedMediaType, fmt.Sprintf("content encoding %q: want gzip or none", enc))
		return
	}
	raw, err := io.ReadAll(body)
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig), err == nil && len(raw) > MaxRequestBytes:
		httpStatus(w, ct, http.StatusRequestEntityTooLarge, fmt.Sprintf("body over MaxRequestBytes (%d)", MaxRequestBytes))
		return
	case err != nil:
		// A gzip stream cut or corrupt, a body cut: data that cannot
		// be decoded, not too much of it.
		httpStatus(w, ct, http.StatusBadRequest, "reading the body: "+err.Error())
		return
	}
	ereq := ptraceotlp.NewExportRequest()
	if ct == "application/json" {
		err = ereq.UnmarshalJSON(raw)
	} else {
		err = ereq.UnmarshalProto(raw)
	}
	if err != nil {
		httpStatus(w, ct, http.StatusBadRequest, "not an OTLP trace export: "+err.Error())
		return
	}
	rejected, err := r.asm.Consume(ereq.Traces(), time.Now())
	if err != nil {
		w.Header().Set("Retry-After", strconv.Itoa(int(RetryAfter/time.Second)))
		httpStatus(w, ct, http.StatusServiceUnavailable, err.Error())
		return
	}
	resp := exportResponse(rejected)
	var out []byte
	if ct == "application/json" {
		out, err = resp.MarshalJSON()
	} else {
		out, err = resp.MarshalProto()
	}
	if err != nil {
		httpStatus(w, ct, http.StatusInternalServerError, err.Error())
		return
	}
	w.Header().Set("Content-Type", ct)
	w.Write(out)
}

// httpStatus answers an OTLP/HTTP request that failed: the body is a
// google.rpc.Status, as OTLP/HTTP wants, in the request's encoding (JSON for
// a JSON request, protobuf otherwise).
func httpStatus(w http.ResponseWriter, ct string, code int, msg string) {
	st := &spb.Status{Code: int32(grpcCode(code)), Message: msg}
	var out []byte
	var err error
	if ct == "application/json" {
		out, err = protojson.Marshal(st)
	} else {
		ct = "application/x-protobuf"
		out, err = proto.Marshal(st)
	}
	if err != nil { // a Status always marshals; never leave the answer empty
		http.Error(w, msg, code)
		return
	}
	w.Header().Set("Content-Type", ct)
	w.WriteHeader(code)
	w.Write(out)
}

// grpcCode is the gRPC code of an OTLP/HTTP status, for the Status body.
func grpcCode(httpCode int) codes.Code {
	switch httpCode {
	case http.StatusBadRequest:
		return codes.InvalidArgument
	case http.StatusRequestEntityTooLarge:
		return codes.ResourceExhausted
	case http.StatusServiceUnavailable:
		return codes.Unavailable
	case http.StatusMethodNotAllowed, http.StatusUnsupportedMediaType:
		return codes.Unimplemented
	}
	return codes.Internal
}
