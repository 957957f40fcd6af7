package daemon

import (
	"net/http"
	"net/http/pprof"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/converge-dev/converge/cmd/converge/daemon/httpserve"
)

// newMetricsServer serves the daemon's registry on GET /metrics, on every replica (leader
// or not), and with withPprof Go's profiles on /debug/pprof/.
func newMetricsServer(addr string, reg prometheus.Gatherer, withPprof bool) httpserve.Runnable {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	if withPprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	return httpserve.Runnable{Addr: addr, Handler: mux}
}
