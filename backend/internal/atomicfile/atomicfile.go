// Package atomicfile writes a file so that a reader finds the old content
// or the new, never part of it: the backend's snapshots.
package atomicfile

import (
	"fmt"
	"os"
	"path/filepath"
)

// Write writes b to dir/name through a temporary file in dir, synced and
// renamed over the old one. More than limit bytes (limit > 0) are refused,
// and nothing is written.
func Write(dir, name string, b []byte, limit int) error {
	if limit > 0 && len(b) > limit {
		return fmt.Errorf("%d bytes, more than the limit of %d: not written", len(b), limit)
	}
	f, err := os.CreateTemp(dir, name+".*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name()) // after the rename, nothing
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), filepath.Join(dir, name))
}
