//go:build memprofile

package main

// A backend built with -tags memprofile serves net/http/pprof on the
// address in NODEDNS_PPROF, for the heap profiles of docs/backend-memory.md
// ("What stays: the floor"): `go build -tags memprofile -o BIN ./backend`,
// then `make memstudy MEMSTUDY_FLAGS='-memstudy.extra-bin=BIN
// -memstudy.extra=NODEDNS_PPROF=127.0.0.1:6061'` and `go tool pprof
// http://127.0.0.1:6061/debug/pprof/heap`. The release build has neither
// the handler nor the import (which would also turn on the runtime's heap
// profiling, and its bucket table, in every backend).

import (
	"net/http"
	_ "net/http/pprof"
	"os"
)

func init() {
	if addr := os.Getenv("NODEDNS_PPROF"); addr != "" {
		go func() { _ = http.ListenAndServe(addr, nil) }()
	}
}
