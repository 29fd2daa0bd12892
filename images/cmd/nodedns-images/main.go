// Command nodedns-images builds the nodedns-frontend and nodedns-backend
// images from the source tree without root or a Docker engine, for
// linux/amd64 and linux/arm64, and writes each as an OCI image archive
// holding its image index (`make images`); pushes them (-push); publishes
// a release, both indexes and the Helm chart (-release, `make release`);
// or regenerates the Debian base's lock files (-update-lock).
//
//	nodedns-images [-out bin/images] [-registry ghcr.io/nodedns] [-version V] [-only NAME] [-arch amd64,arm64] [-push] [-insecure]
//	nodedns-images -release -registry REGISTRY -version VERSION [-insecure]
//	nodedns-images -update-lock
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/nodedns/nodedns/helm"
	"github.com/nodedns/nodedns/images"
	"github.com/nodedns/nodedns/images/release"
)

func main() {
	out := flag.String("out", "bin/images", "directory the archives <name>.tar are written to")
	registry := flag.String("registry", images.DefaultRegistry, "repository prefix of the image names (and of the chart with -release)")
	version := flag.String("version", "", "version stamped into the binaries and used as the tag (default: the chart's appVersion)")
	push := flag.Bool("push", false, "also push both image indexes to <registry>/<name>:<version>, with the credentials of ~/.docker/config.json")
	rel := flag.Bool("release", false, "push both image indexes and the chart (oci://<registry>/nodedns:<version>); write no archive")
	insecure := flag.Bool("insecure", false, "talk plain HTTP to the registry (always so for localhost and 127.0.0.1)")
	only := flag.String("only", "", "build only this image (nodedns-frontend or nodedns-backend)")
	arch := flag.String("arch", strings.Join(images.Architectures, ","), "architectures to build, comma-separated")
	updateLock := flag.Bool("update-lock", false, "regenerate the Debian base's lock files from the mirror ($NODEDNS_DEBIAN_MIRROR) and exit")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	switch {
	case *updateLock:
		err = runUpdateLock(ctx)
	case *rel:
		err = runRelease(ctx, *registry, *version, strings.Split(*arch, ","), *insecure)
	default:
		err = run(ctx, *out, *registry, *version, *only, strings.Split(*arch, ","), *push, *insecure)
	}
	if err != nil {
		log.Fatalf("nodedns-images: %v", err)
	}
}

// readTree reads the tree at or above the working directory; an empty
// version is the chart's appVersion.
func readTree(ctx context.Context, version string) (images.Tree, error) {
	wd, err := os.Getwd()
	if err != nil {
		return images.Tree{}, err
	}
	root, err := images.FindRoot(wd)
	if err != nil {
		return images.Tree{}, err
	}
	if version == "" {
		c, err := helm.Load()
		if err != nil {
			return images.Tree{}, err
		}
		version = c.Metadata.AppVersion
	}
	return images.ReadTree(ctx, root, version)
}

func run(ctx context.Context, out, registry, version, only string, archs []string, push, insecure bool) error {
	tree, err := readTree(ctx, version)
	if err != nil {
		return err
	}
	names := []string{images.FrontendName, images.BackendName}
	if only != "" {
		if only != images.FrontendName && only != images.BackendName {
			return fmt.Errorf("-only=%q: want %s or %s", only, images.FrontendName, images.BackendName)
		}
		names = []string{only}
	}
	logf := func(f string, a ...any) { log.Printf(f, a...) }
	fmt.Printf("%-17s %-12s %-71s %10s %12s  %s\n", "IMAGE", "PLATFORM", "DIGEST", "COMPRESSED", "UNCOMPRESSED", "ARCHIVE")
	for _, name := range names {
		start := time.Now()
		b, err := images.BuildImage(ctx, tree, registry, name, archs, logf)
		if err != nil {
			return err
		}
		path := filepath.Join(out, b.Name+".tar")
		if err := images.WriteIndexArchive(path, b.Index, b.Ref, b.Tag); err != nil {
			return err
		}
		s, err := release.Summarize(b)
		if err != nil {
			return err
		}
		fmt.Printf("%-17s %-12s %-71s %10s %12s  %s (%s, %s)\n", b.Name, "index", s.Digest, "", "", path, b.Ref, time.Since(start).Round(time.Millisecond))
		for i, p := range s.Platforms {
			fmt.Printf("%-17s %-12s %-71s %9.1fM %11.1fM\n", b.Name, "linux/"+s.Archs[i], p.Digest, mib(p.Compressed), mib(p.Uncompressed))
		}
		if push {
			if err := images.PushIndex(ctx, b.Ref, b.Index, insecure); err != nil {
				return err
			}
			fmt.Printf("pushed %s@%s\n", b.Ref, s.Digest)
		}
	}
	return nil
}

func runRelease(ctx context.Context, registry, version string, archs []string, insecure bool) error {
	if version == "" {
		return fmt.Errorf("-release needs -version (make release VERSION=...)")
	}
	tree, err := readTree(ctx, version)
	if err != nil {
		return err
	}
	res, err := release.Publish(ctx, tree, release.Options{Registry: registry, PlainHTTP: insecure, Archs: archs,
		Logf: func(f string, a ...any) { log.Printf(f, a...) }})
	if err != nil {
		return err
	}
	res.Print(os.Stdout)
	return nil
}

func runUpdateLock(ctx context.Context) error {
	wd, err := os.Getwd()
	if err != nil {
		return err
	}
	root, err := images.FindRoot(wd)
	if err != nil {
		return err
	}
	for _, arch := range images.Architectures {
		b, err := images.UpdateLock(ctx, arch)
		if err != nil {
			return err
		}
		p := filepath.Join(root, images.LockPath(arch))
		if err := os.WriteFile(p, b, 0o644); err != nil {
			return err
		}
		fmt.Printf("wrote %s\n", p)
	}
	return nil
}

func mib(n int64) float64 { return float64(n) / (1 << 20) }
