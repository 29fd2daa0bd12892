// Command floodcmd runs a floodtest flood in a process of its own, as a
// hostile neighbour would be: floodcmd ADDR N MODE SOURCE,... It prints
// "up" once every connection has been dialled, and floods until killed.
package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/nodedns/nodedns/shared/httpserve/floodtest"
)

func main() {
	if len(os.Args) != 5 {
		fmt.Fprintln(os.Stderr, "usage: floodcmd ADDR N idle|slowloris SOURCE,...")
		os.Exit(2)
	}
	n, err := strconv.Atoi(os.Args[2])
	if err != nil {
		fmt.Fprintln(os.Stderr, "floodcmd:", err)
		os.Exit(2)
	}
	mode := floodtest.Idle
	if os.Args[3] == "slowloris" {
		mode = floodtest.Slowloris
	}
	var sources []string
	if os.Args[4] != "" {
		sources = strings.Split(os.Args[4], ",")
	}
	// floodtest.Start takes a testing.TB for its cleanup and skips; a
	// benchmark result's B is not available here, so use a minimal one.
	floodtest.Start(&tb{}, os.Args[1], n, sources, mode)
	fmt.Println("up")
	select {}
}

// tb is the part of testing.TB that floodtest uses outside a test.
type tb struct{ testing.TB }

func (*tb) Helper()        {}
func (*tb) Cleanup(func()) {}
func (*tb) Skipf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "floodcmd: "+format+"\n", args...)
	os.Exit(3)
}
