package a

import (
	"errors"
	"fmt"
	"testing"
)

func TestPass(t *testing.T) { t.Log("fine") }

func TestSkipRoot(t *testing.T) { t.Skip("kernel test: needs root") }

func TestSkipRootToo(t *testing.T) { t.Log("before"); t.Skip("kernel test: needs root") }

func TestSkipf(t *testing.T) { t.Skipf("dnsperf not installed: %v", errors.New("exec: not found")) }

func TestSkipNow(t *testing.T) { t.SkipNow() }

func TestSkipMultiline(t *testing.T) { t.Skip("go mod download x: exit 1\nsecond line\nthird") }

func TestFail(t *testing.T) {
	t.Log("about to fail")
	t.Errorf("got %d, want %d", 1, 2)
}

func TestSub(t *testing.T) {
	for _, n := range []string{"ok", "bad", "skipped"} {
		t.Run(n, func(t *testing.T) {
			switch n {
			case "bad":
				t.Error("sub failed")
			case "skipped":
				t.Skip("no IPv6 on this machine")
			}
		})
	}
}

func TestParallel(t *testing.T) {
	for i := range 3 {
		t.Run(fmt.Sprint(i), func(t *testing.T) { t.Parallel() })
	}
}

func Example() {
	fmt.Println("hello")
	// Output: hello
}
