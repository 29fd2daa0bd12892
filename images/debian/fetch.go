package debian

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// Fetcher downloads files from a Debian mirror, keeping verified .debs in
// a cache directory.
type Fetcher struct {
	// Mirror is the archive root, "http://deb.debian.org/debian".
	Mirror string
	// CacheDir holds fetched .debs by file name; "" caches nothing.
	CacheDir string
	// Client defaults to http.DefaultClient.
	Client *http.Client
}

// maxDownload bounds one download: a Packages.xz is about 9 MiB, the
// largest .deb of the base about 3 MiB.
const maxDownload = 256 << 20

// Get returns the body of <mirror>/<rel>.
func (f Fetcher) Get(ctx context.Context, rel string) ([]byte, error) {
	url := strings.TrimSuffix(f.Mirror, "/") + "/" + rel
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, fmt.Errorf("fetch %s: %w", url, err)
	}
	c := f.Client
	if c == nil {
		c = http.DefaultClient
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, fmt.Errorf("fetch %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("fetch %s: %s", url, resp.Status)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxDownload+1))
	if err != nil {
		return nil, fmt.Errorf("fetch %s: %w", url, err)
	}
	if len(b) > maxDownload {
		return nil, fmt.Errorf("fetch %s: larger than %d bytes", url, maxDownload)
	}
	return b, nil
}

// Deb returns the .deb that l pins: from the cache when a file there has
// l's digest, else from the mirror, checked against l's size and digest
// and then cached.
func (f Fetcher) Deb(ctx context.Context, l Locked) ([]byte, error) {
	cached := ""
	if f.CacheDir != "" {
		cached = filepath.Join(f.CacheDir, path.Base(l.Filename))
		if b, err := os.ReadFile(cached); err == nil && verify(b, l) == nil {
			return b, nil
		}
	}
	b, err := f.Get(ctx, l.Filename)
	if err != nil {
		return nil, err
	}
	if err := verify(b, l); err != nil {
		return nil, err
	}
	if cached != "" {
		if err := writeFileAtomic(cached, b); err != nil {
			return nil, fmt.Errorf("cache %s: %w", l.Filename, err)
		}
	}
	return b, nil
}

// verify checks b against the size and sha256 l pins.
func verify(b []byte, l Locked) error {
	if int64(len(b)) != l.Size {
		return fmt.Errorf("%s: %d bytes, the lock says %d", l.Filename, len(b), l.Size)
	}
	if got := sha256Sum(b); got != l.SHA256 {
		return fmt.Errorf("%s: sha256 %s, the lock says %s", l.Filename, got, l.SHA256)
	}
	return nil
}

func sha256Sum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func writeFileAtomic(p string, b []byte) error {
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(p), "."+filepath.Base(p)+".*")
	if err != nil {
		return err
	}
	if _, err := io.Copy(tmp, bytes.NewReader(b)); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return os.Rename(tmp.Name(), p)
}
