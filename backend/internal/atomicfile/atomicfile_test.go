package atomicfile

import (
	"os"
	"path/filepath"
	"testing"
)

// TestWrite: the file holds the new content, no temporary file stays, and
// content over the limit leaves the old file as it was.
func TestWrite(t *testing.T) {
	dir := t.TempDir()
	if err := Write(dir, "s.json", []byte("one"), 10); err != nil {
		t.Fatal(err)
	}
	if err := Write(dir, "s.json", []byte("more than ten bytes"), 10); err == nil {
		t.Error("content over the limit was written")
	}
	b, err := os.ReadFile(filepath.Join(dir, "s.json"))
	if err != nil || string(b) != "one" {
		t.Errorf("file holds %q (%v), want \"one\"", b, err)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "s.json.*")); len(left) != 0 {
		t.Errorf("temporary files left: %v", left)
	}
}
