// Package health serves the /health and /ready endpoints of a nodedns process.
package health

import (
	"fmt"
	"net/http"
)

// Checker reports whether a process is ready to serve, with a short human
// readable detail ("backend 127.0.0.1:5300: connection refused").
type Checker func() (ready bool, detail string)

// Handler returns a mux with /health (alive: always 200 while the process
// serves HTTP) and /ready (200 when ready() holds, 503 otherwise). Both
// bodies carry the detail so that `curl` tells an operator why.
func Handler(ready Checker) *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("/health", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "OK")
	})
	mux.HandleFunc("/ready", func(w http.ResponseWriter, _ *http.Request) {
		ok, detail := ready()
		if !ok {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		if detail == "" {
			detail = "OK"
			if !ok {
				detail = "not ready"
			}
		}
		fmt.Fprintln(w, detail)
	})
	return mux
}
