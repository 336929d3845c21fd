package telemetry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Server timeouts. A scrape that takes longer than scrapeTimeout (a
// snapshot function stuck behind a lock) is answered 503 rather than left
// hanging.
const (
	scrapeTimeout   = 10 * time.Second
	shutdownTimeout = 5 * time.Second
)

// Handler serves /metrics (the Prometheus text format of the private
// registry), /healthz and /readyz.
func (t *Telemetry) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(t.registry, promhttp.HandlerOpts{
		ErrorLog:      slogPrintln{t.log},
		ErrorHandling: promhttp.ContinueOnError,
		Timeout:       scrapeTimeout,
	}))
	mux.Handle("/healthz", healthHandler(t.Healthy, "unhealthy"))
	mux.Handle("/readyz", healthHandler(t.IsReady, "not ready"))
	mux.HandleFunc("/{$}", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "replaywatch: /metrics /healthz /readyz")
	})
	return mux
}

// Serve listens on addr (host:port; ":0" picks a free port) and serves
// Handler until ctx is done, then shuts down gracefully (in-flight requests
// get a few seconds) and returns nil. A port already taken is an error at
// once, saying so.
func (t *Telemetry) Serve(ctx context.Context, addr string) error {
	ln, err := Listen(addr)
	if err != nil {
		return err
	}
	return t.ServeListener(ctx, ln)
}

// Listen is the listener Serve uses, for callers that want to know the
// port before serving.
func Listen(addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if errors.Is(err, syscall.EADDRINUSE) {
		return nil, fmt.Errorf("telemetry: cannot serve metrics on %s: the port is already in use by another process (choose another address): %w", addr, err)
	}
	if err != nil {
		return nil, fmt.Errorf("telemetry: cannot serve metrics on %s: %w", addr, err)
	}
	return ln, nil
}

// ServeListener is Serve on a listener it takes ownership of.
func (t *Telemetry) ServeListener(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{
		Handler:           t.Handler(),
		ReadHeaderTimeout: 5 * time.Second,
		IdleTimeout:       time.Minute,
		ErrorLog:          slog.NewLogLogger(t.log.Handler(), slog.LevelWarn),
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("telemetry: serving on %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	err := srv.Shutdown(sctx)
	if serr := <-errc; !errors.Is(serr, http.ErrServerClosed) {
		err = errors.Join(err, serr)
	}
	if err != nil {
		return fmt.Errorf("telemetry: shutting down %s: %w", ln.Addr(), err)
	}
	return nil
}

// slogPrintln adapts a slog.Logger to promhttp.Logger.
type slogPrintln struct{ log *slog.Logger }

func (l slogPrintln) Println(v ...any) { l.log.Warn("telemetry: scrape", "error", fmt.Sprint(v...)) }
