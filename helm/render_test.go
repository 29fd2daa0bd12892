package helm

import (
	"os"
	"testing"
)

func TestPrintDefault(t *testing.T) {
	if os.Getenv("NODEDNS_PRINT") == "" {
		t.Skip()
	}
	r, err := Render(nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Log(r.YAML())
	t.Log(r.Notes)
	if _, err := r.Objects(); err != nil {
		t.Fatal(err)
	}
}
