package testbed

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// An OCI registry for tests: go-containerregistry's registry handler, in
// process, with its blobs on disk in the testbed directory. Images and
// charts are named by Registry.Host, its listener on the test process's
// loopback (pushes, helm). Real nodes' containerd runs in node network
// namespaces, where 127.0.0.1 is the node's own loopback: it reaches the
// same handler through a second listener in the control-plane namespace,
// at NodeGateway (NodeHost), through a hosts.toml mirror for Host (see
// RealNodeOptions.Registries). Neither listener adds anything to the host's
// links, addresses or routes.
//
//	test process ──► 127.0.0.1:PORT ─┐
//	                                  ├─► registry handler ─► blobs in <tb.Dir>/registry-PORT
//	node containerd ─► 172.31.254.1:PORT (cp netns) ─┘

// maxRegistryRequests bounds the request log: a release test pushes and
// pulls a few hundred blobs and manifests.
const maxRegistryRequests = 100_000

// registryShutdownTimeout bounds Close's wait for requests in flight: a
// pull of the largest image here takes a second or two.
const registryShutdownTimeout = 5 * time.Second

// Registry is an OCI distribution registry started by StartRegistry. It
// speaks plain HTTP, with no authentication.
type Registry struct {
	// Host is "127.0.0.1:PORT", the registry's name: images and charts are
	// referenced as Host/repository:tag, from the test process.
	Host string
	// NodeHost is "NodeGateway:PORT" (the same port), where processes in
	// node network namespaces reach the registry; nodes' containerd maps
	// Host to it with a hosts.toml mirror.
	NodeHost string
	// Dir holds the blobs and the request log registry.log.
	Dir string

	servers []*http.Server
	logFile *os.File

	mu       sync.Mutex        // guards requests
	requests []RegistryRequest // in arrival order, at most maxRegistryRequests
}

// RegistryRequest is one request the registry answered.
type RegistryRequest struct {
	// FromNodes is true for requests on NodeHost (from node namespaces),
	// false for requests on Host (from the test process).
	FromNodes bool
	// Method and Path are the request's ("GET", "/v2/repo/manifests/tag").
	Method, Path string
	// Status is the response's status code.
	Status int
}

// StartRegistry starts a registry on a free port of 127.0.0.1 and on the
// same port at NodeGateway in the control-plane namespace (created here if
// no node exists yet). Stop closes it and Dir goes with the testbed
// directory. Requires root (network namespaces).
func (tb *Testbed) StartRegistry(ctx context.Context) (*Registry, error) {
	nw, err := tb.ensureNetwork(ctx)
	if err != nil {
		return nil, fmt.Errorf("registry: %w", err)
	}
	hostLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("registry: %w", err)
	}
	port := hostLn.Addr().(*net.TCPAddr).Port
	nodeHost := net.JoinHostPort(NodeGateway, strconv.Itoa(port))
	// The control-plane namespace holds only the API server relay (on the
	// API server's port, which the host listener cannot have) and the stub
	// DNS on 53: the port is free there.
	nodeLn, err := listenInNetns(nw.netns, nodeHost)
	if err != nil {
		hostLn.Close()
		return nil, fmt.Errorf("registry: %w", err)
	}
	r, err := newRegistry(filepath.Join(tb.Dir, "registry-"+strconv.Itoa(port)), hostLn, nodeLn, nodeHost)
	if err != nil {
		return nil, err
	}
	tb.mu.Lock()
	stopped := tb.stopped
	if !stopped {
		tb.registries = append(tb.registries, r)
	}
	tb.mu.Unlock()
	if stopped { // Stop ran meanwhile and did not see r
		return nil, errors.Join(errors.New("registry: testbed stopped"), r.close())
	}
	tb.opts.Logf("testbed: registry at %s (nodes: %s, dir %s)", r.Host, r.NodeHost, r.Dir)
	return r, nil
}

// newRegistry serves one registry handler on hostLn (Host) and nodeLn
// (requests recorded as FromNodes), with blobs under dir. It takes
// ownership of both listeners.
func newRegistry(dir string, hostLn, nodeLn net.Listener, nodeHost string) (*Registry, error) {
	r := &Registry{Host: hostLn.Addr().String(), NodeHost: nodeHost, Dir: dir}
	fail := func(err error) (*Registry, error) {
		hostLn.Close()
		nodeLn.Close()
		if r.logFile != nil {
			r.logFile.Close()
		}
		return nil, fmt.Errorf("registry: %w", err)
	}
	blobs := filepath.Join(dir, "blobs")
	if err := os.MkdirAll(blobs, 0o755); err != nil {
		return fail(err)
	}
	f, err := os.OpenFile(filepath.Join(dir, "registry.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fail(err)
	}
	r.logFile = f
	h := registry.New(
		registry.Logger(log.New(f, "", log.LstdFlags|log.Lmicroseconds)),
		registry.WithBlobHandler(registry.NewDiskBlobHandler(blobs)),
	)
	for _, l := range []struct {
		ln        net.Listener
		fromNodes bool
	}{{hostLn, false}, {nodeLn, true}} {
		srv := &http.Server{Handler: r.record(h, l.fromNodes), ReadHeaderTimeout: 30 * time.Second}
		r.servers = append(r.servers, srv)
		go func() { _ = srv.Serve(l.ln) }() // returns ErrServerClosed on close
	}
	return r, nil
}

// record wraps h to append each request to r's log once it is answered.
func (r *Registry) record(h http.Handler, fromNodes bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		h.ServeHTTP(sw, req)
		r.mu.Lock()
		if len(r.requests) < maxRegistryRequests {
			r.requests = append(r.requests, RegistryRequest{FromNodes: fromNodes, Method: req.Method, Path: req.URL.Path, Status: sw.status})
		}
		r.mu.Unlock()
	})
}

// Requests returns the requests answered so far, in arrival order.
func (r *Registry) Requests() []RegistryRequest {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]RegistryRequest(nil), r.requests...)
}

// Ref is the reference of repository repo (with ":tag" or "@digest") in
// this registry, as the test process and nodes both name it.
func (r *Registry) Ref(repo string) string { return r.Host + "/" + repo }

// PushArchive pushes what an OCI image archive holds (BuildPodImages,
// BuildBackendImage, images.WriteArchive or WriteIndexArchive): the image,
// or the image index with all its images, to repoTag ("repository:tag")
// in r. It returns the reference by digest, Host/repository@sha256:...,
// the digest `ctr images import` of the archive would show.
func (r *Registry) PushArchive(ctx context.Context, a Archive, repoTag string) (string, error) {
	ref, err := name.ParseReference(r.Ref(repoTag), name.Insecure, name.StrictValidation)
	if err != nil {
		return "", fmt.Errorf("push %s: %w", a.Path, err)
	}
	var pushed string
	err = withArchive(a.Path, func(root v1.ImageIndex) error {
		im, err := root.IndexManifest()
		if err != nil {
			return err
		}
		if len(im.Manifests) != 1 {
			return fmt.Errorf("index.json lists %d manifests, want 1", len(im.Manifests))
		}
		d := im.Manifests[0]
		var push error
		switch {
		case d.MediaType.IsIndex():
			idx, err := root.ImageIndex(d.Digest)
			if err != nil {
				return err
			}
			push = remote.WriteIndex(ref, idx, remote.WithContext(ctx))
		case d.MediaType.IsImage():
			img, err := root.Image(d.Digest)
			if err != nil {
				return err
			}
			push = remote.Write(ref, img, remote.WithContext(ctx))
		default:
			return fmt.Errorf("index.json lists a %s, neither an image nor an index", d.MediaType)
		}
		if push != nil {
			return fmt.Errorf("push to %s: %w", ref, push)
		}
		pushed = ref.Context().Digest(d.Digest.String()).String()
		return nil
	})
	return pushed, err
}

// withArchiveImage calls f with the linux/amd64 image of an OCI image
// archive (see withArchive): the image its index.json names, or the amd64
// image of the index it names.
func withArchiveImage(path string, f func(v1.Image) error) error {
	return withArchive(path, func(root v1.ImageIndex) error {
		img, err := amd64Image(root)
		if err != nil {
			return err
		}
		return f(img)
	})
}

// withArchive calls f with the index.json of an OCI image layout in a tar
// file (images.WriteArchive's format), whose blobs are read, while f runs,
// from a copy unpacked in a temporary directory.
func withArchive(path string, f func(v1.ImageIndex) error) error {
	dir, err := os.MkdirTemp("", "nodedns-archive-")
	if err != nil {
		return fmt.Errorf("read archive %s: %w", path, err)
	}
	defer os.RemoveAll(dir)
	if err := untar(path, dir); err != nil {
		return fmt.Errorf("read archive %s: %w", path, err)
	}
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return fmt.Errorf("read archive %s: %w", path, err)
	}
	if err := f(idx); err != nil {
		return fmt.Errorf("archive %s: %w", path, err)
	}
	return nil
}

// amd64Image finds the linux/amd64 image of idx, one index deep.
func amd64Image(idx v1.ImageIndex) (v1.Image, error) {
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, err
	}
	for _, d := range im.Manifests {
		switch {
		case d.MediaType.IsImage() && (d.Platform == nil || d.Platform.Architecture == "amd64"):
			return idx.Image(d.Digest)
		case d.MediaType.IsIndex():
			inner, err := idx.ImageIndex(d.Digest)
			if err != nil {
				return nil, err
			}
			if img, err := amd64Image(inner); err == nil {
				return img, nil
			}
		}
	}
	return nil, errors.New("no linux/amd64 image in the index")
}

// untar unpacks the regular files and directories of a tar file into dir.
func untar(path, dir string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		p := filepath.Join(dir, filepath.FromSlash(h.Name))
		if !strings.HasPrefix(p, filepath.Clean(dir)+string(filepath.Separator)) {
			return fmt.Errorf("entry %q leaves the archive", h.Name)
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(p, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return err
			}
			out, err := os.Create(p)
			if err != nil {
				return err
			}
			_, err = io.Copy(out, tr)
			if cerr := out.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		}
	}
}

// close stops both listeners, waiting a little for requests in flight.
func (r *Registry) close() error {
	ctx, cancel := context.WithTimeout(context.Background(), registryShutdownTimeout)
	defer cancel()
	var errs []error
	for _, srv := range r.servers {
		if err := srv.Shutdown(ctx); err != nil {
			errs = append(errs, srv.Close())
		}
	}
	errs = append(errs, r.logFile.Close())
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("registry %s: %w", r.Host, err)
	}
	return nil
}

// statusWriter remembers the status code a handler wrote.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}
