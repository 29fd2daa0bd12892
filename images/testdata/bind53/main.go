// Command bind53 binds UDP port 53 on all addresses and reports whether it
// could: the test of a file capability's effect (capability_test.go).
package main

import (
	"fmt"
	"net"
	"os"
)

func main() {
	c, err := net.ListenPacket("udp4", "0.0.0.0:53")
	if err != nil {
		fmt.Println("bind:", err)
		os.Exit(1)
	}
	c.Close()
	fmt.Println("bound")
}
