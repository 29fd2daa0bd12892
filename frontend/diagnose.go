package main

import (
	"fmt"
	"io"
)

// diagnose runs `nodedns-frontend diagnose`: a report of the node's DNS
// takeover (interface, addresses, rules, backend). It returns the exit code.
func diagnose(_ []string, _, stderr io.Writer) int {
	fmt.Fprintln(stderr, "nodedns-frontend diagnose: not implemented")
	return 2
}
