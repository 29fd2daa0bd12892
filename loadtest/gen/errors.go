package gen

import "syscall"

// errConnRefused is what a connected UDP socket reports after an ICMP
// port unreachable: the server's port is closed (it restarts). A stub
// resolver keeps waiting for the timeout.
var errConnRefused = syscall.ECONNREFUSED
