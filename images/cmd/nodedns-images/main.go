// Command nodedns-images builds the nodedns-frontend and nodedns-backend
// images from the source tree without a Docker engine and writes each as an
// OCI image archive (`make images`), or pushes them to a registry (-push).
//
//	nodedns-images [-out bin/images] [-registry ghcr.io/nodedns] [-version V] [-only NAME] [-push [-insecure]]
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/nodedns/nodedns/images"
)

func main() {
	out := flag.String("out", "bin/images", "directory the archives <name>.tar are written to")
	registry := flag.String("registry", images.DefaultRegistry, "repository prefix of the image names")
	version := flag.String("version", "", "version stamped into the binaries and used as the tag (default: git describe --tags --always --dirty)")
	push := flag.Bool("push", false, "also push both images to <registry>/<name>:<version>, with the credentials of ~/.docker/config.json")
	insecure := flag.Bool("insecure", false, "push over plain HTTP (a registry on localhost)")
	only := flag.String("only", "", "build only this image (nodedns-frontend or nodedns-backend)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *out, *registry, *version, *only, *push, *insecure); err != nil {
		log.Fatalf("nodedns-images: %v", err)
	}
}

func run(ctx context.Context, out, registry, version, only string, push, insecure bool) error {
	wd, err := os.Getwd()
	if err != nil {
		return err
	}
	root, err := images.FindRoot(wd)
	if err != nil {
		return err
	}
	tree, err := images.ReadTree(ctx, root, version)
	if err != nil {
		return err
	}
	if only != "" && only != images.FrontendName && only != images.BackendName {
		return fmt.Errorf("-only=%q: want %s or %s", only, images.FrontendName, images.BackendName)
	}
	logf := func(f string, a ...any) { log.Printf(f, a...) }
	var built []images.Built
	if only == "" || only == images.FrontendName {
		b, err := images.Frontend(ctx, tree, registry, logf)
		if err != nil {
			return err
		}
		built = append(built, b)
	}
	if only == "" || only == images.BackendName {
		b, err := images.Backend(ctx, tree, registry)
		if err != nil {
			return err
		}
		built = append(built, b)
	}
	fmt.Printf("%-17s %-71s %10s %12s  %s\n", "IMAGE", "DIGEST", "COMPRESSED", "UNCOMPRESSED", "ARCHIVE")
	for _, b := range built {
		start := time.Now()
		path := filepath.Join(out, b.Name+".tar")
		if err := images.WriteArchive(path, b.Image, b.Ref, b.Tag); err != nil {
			return err
		}
		s, err := images.Summarize(b.Ref, b.Image)
		if err != nil {
			return err
		}
		fmt.Printf("%-17s %-71s %9.1fM %11.1fM  %s (%s, %s)\n", b.Name, s.Digest, mib(s.Compressed), mib(s.Uncompressed), path, b.Ref, time.Since(start).Round(time.Millisecond))
		if push {
			if err := images.Push(ctx, b.Ref, b.Image, insecure); err != nil {
				return err
			}
			fmt.Printf("pushed %s@%s\n", b.Ref, s.Digest)
		}
	}
	return nil
}

func mib(n int64) float64 { return float64(n) / (1 << 20) }
