package scenario

import (
	"os"
	"path/filepath"
	"testing"
)

// TestWriteFilesMakesDir: `compare -from results.json -out DIR` writes into
// a DIR that does not exist yet, and what it writes reads back.
func TestWriteFilesMakesDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "b")
	rep := &Report{Command: "nodedns-loadtest compare", Machine: "test"}
	path, err := rep.WriteFiles(dir)
	if err != nil {
		t.Fatalf("WriteFiles into a missing directory: %v", err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("report: %v", err)
	}
	back, err := ReadReport(filepath.Join(dir, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	if back.Command != rep.Command || back.Machine != rep.Machine {
		t.Errorf("read back %+v, want command %q machine %q", back, rep.Command, rep.Machine)
	}
}
