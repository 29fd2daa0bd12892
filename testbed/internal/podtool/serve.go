package main

import (
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

// serve answers HTTP GET on -http with "<hostname> <greeting>\n" and echoes
// every byte it gets on -echo back to the sender, until SIGTERM. It prints
// the greeting first, so that a container log holds it.
func serve(args []string) int {
	fs := flag.NewFlagSet("serve", flag.ExitOnError)
	httpAddr := fs.String("http", ":80", "HTTP listen address")
	echoAddr := fs.String("echo", ":7", "TCP echo listen address")
	greeting := fs.String("greeting", "hello", "text of every HTTP answer, printed at start")
	_ = fs.Parse(args)
	host, _ := os.Hostname()
	hl, err := net.Listen("tcp", *httpAddr)
	if err != nil {
		fmt.Fprintf(os.Stderr, "serve: %v\n", err)
		return 1
	}
	el, err := net.Listen("tcp", *echoAddr)
	if err != nil {
		fmt.Fprintf(os.Stderr, "serve: %v\n", err)
		return 1
	}
	fmt.Printf("serve: %s %s: http on %s, echo on %s\n", host, *greeting, hl.Addr(), el.Addr())
	body := host + " " + *greeting + "\n"
	go func() {
		_ = http.Serve(hl, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Printf("serve: %s %s from %s\n", r.Method, r.URL.Path, r.RemoteAddr)
			w.Header().Set("Content-Type", "text/plain")
			_, _ = io.Copy(w, strings.NewReader(body))
		}))
	}()
	go func() {
		for {
			c, err := el.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				n := echo(c)
				fmt.Printf("serve: echoed %d bytes to %s\n", n, c.RemoteAddr())
			}()
		}
	}()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
	return 0
}

// say prints its words to stdout and exits with -exit: a command whose
// output and exit code an exec must pass back.
func say(args []string) int {
	fs := flag.NewFlagSet("say", flag.ExitOnError)
	code := fs.Int("exit", 0, "exit code")
	_ = fs.Parse(args)
	fmt.Println(strings.Join(fs.Args(), " "))
	return *code
}

// echo writes back what c sends until c's sender closes, and returns the
// byte count. A plain loop: io.Copy(c, c) would splice a socket into itself.
func echo(c net.Conn) int64 {
	var n int64
	buf := make([]byte, 32<<10)
	for {
		r, err := c.Read(buf)
		if r > 0 {
			w, werr := c.Write(buf[:r])
			n += int64(w)
			if werr != nil {
				return n
			}
		}
		if err != nil {
			return n
		}
	}
}
