package crash

import "testing"

func TestOK(t *testing.T) {}

func TestPanic(t *testing.T) { t.Log("going down"); var m map[string]int; m["x"] = 1 }
