// Package health serves the /health and /ready endpoints of a nodedns process.
package health

import (
	"bytes"

	"github.com/nodedns/nodedns/shared/httpserve"
)

// Checker reports whether a process is ready to serve, with a short human
// readable detail ("backend 127.0.0.1:5300: connection refused").
type Checker func() (ready bool, detail string)

// Routes returns /health (alive: always 200 while the process serves HTTP)
// and /ready (200 when ready() holds, 503 otherwise). Both bodies carry the
// detail so that `curl` tells an operator why.
func Routes(ready Checker) map[string]httpserve.Handler {
	return map[string]httpserve.Handler{
		"/health": func(body *bytes.Buffer) (int, string) {
			body.WriteString("OK\n")
			return 200, textPlain
		},
		"/ready": func(body *bytes.Buffer) (int, string) {
			ok, detail := ready()
			if detail == "" {
				detail = "OK"
				if !ok {
					detail = "not ready"
				}
			}
			body.WriteString(detail + "\n")
			if !ok {
				return 503, textPlain
			}
			return 200, textPlain
		},
	}
}

const textPlain = "text/plain; charset=utf-8"
