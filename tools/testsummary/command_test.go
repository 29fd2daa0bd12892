package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// fakeEnv makes the test binary act as `go test -json`: it prints the
// recording named in the variable ("file:status") and exits with status.
const fakeEnv = "TESTSUMMARY_FAKE_GOTEST"

func TestMain(m *testing.M) {
	if v := os.Getenv(fakeEnv); v != "" {
		file, status, _ := strings.Cut(v, ":")
		b, err := os.ReadFile(file)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(100)
		}
		os.Stdout.Write(b)
		fmt.Fprintln(os.Stderr, "fake go test: some stderr")
		code, _ := strconv.Atoi(status)
		os.Exit(code)
	}
	os.Exit(m.Run())
}

// TestRunCommand checks `testsummary run`: the exit status is the
// command's (so `make test` fails when a test fails), or 1 when the events
// show a failure the status hid; the recording is the command's stdout
// byte for byte; stderr passes through.
func TestRunCommand(t *testing.T) {
	tests := []struct {
		file   string
		status int
		want   int
	}{
		{"pass.json", 0, 0},
		{"failures.json", 1, 1},
		{"pass.json", 2, 2},     // go test failed before running tests (bad flag, go list error)
		{"failures.json", 0, 1}, // failures the command's status did not report
		{"../missing.json", 0, 100},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s-%d", tt.file, tt.status), func(t *testing.T) {
			t.Setenv(fakeEnv, filepath.Join("testdata", tt.file)+":"+strconv.Itoa(tt.status))
			rec := filepath.Join(t.TempDir(), "out", "run.json")
			var stdout, stderr bytes.Buffer
			code := run([]string{"run", rec, "--", os.Args[0]}, &stdout, &stderr)
			if code != tt.want {
				t.Errorf("exit status %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tt.want, stdout.String(), stderr.String())
			}
			if tt.want == 100 {
				return
			}
			if !strings.Contains(stderr.String(), "fake go test: some stderr") {
				t.Errorf("stderr not passed through: %q", stderr.String())
			}
			got, err := os.ReadFile(rec)
			if err != nil {
				t.Fatal(err)
			}
			orig, err := os.ReadFile(filepath.Join("testdata", tt.file))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, orig) {
				t.Errorf("recording differs from the command's output (%d bytes, want %d)", len(got), len(orig))
			}
		})
	}
}

// TestReportCommand checks `testsummary report` exit statuses and the
// NODEDNS_STRICT_SKIPS default: pass.json has one skip a root run cures.
func TestReportCommand(t *testing.T) {
	tests := []struct {
		env  string
		args []string
		want int
	}{
		{"", []string{"report", "testdata/pass.json"}, 0},
		{"1", []string{"report", "testdata/pass.json"}, 1},
		{"1", []string{"report", "-strict-skips=false", "testdata/pass.json"}, 0},
		{"", []string{"report", "-strict-skips", "testdata/pass.json"}, 1},
		{"1", []string{"report", "-expected-skips", "^kernel test: needs root$", "testdata/pass.json"}, 0},
		{"1", []string{"report", "-expected-skips", "^other reason$", "testdata/pass.json"}, 1},
		{"1", []string{"report", "-expected-skips", "(", "testdata/pass.json"}, 2},
		{"", []string{"report", "testdata/pass.json", "testdata/failures.json"}, 1},
		{"", []string{"report", "testdata/nonexistent.json"}, 1},
		{"", []string{"report"}, 2},
		{"", []string{"run", "x.json", "go", "test"}, 2},
		{"", nil, 2},
	}
	for _, tt := range tests {
		t.Run(tt.env+strings.Join(tt.args, " "), func(t *testing.T) {
			t.Setenv("NODEDNS_STRICT_SKIPS", tt.env)
			t.Setenv("NODEDNS_EXPECTED_SKIPS", "")
			var stdout, stderr bytes.Buffer
			if code := run(tt.args, &stdout, &stderr); code != tt.want {
				t.Errorf("exit status %d, want %d\n%s%s", code, tt.want, stdout.String(), stderr.String())
			}
		})
	}
}

func TestCommandLine(t *testing.T) {
	long := []string{"go", "test", "-json"}
	for range 20 {
		long = append(long, "github.com/nodedns/nodedns/loadtest/scenario")
	}
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"go", "test", "-json", "./..."}, "go test -json ./..."},
		{long, "go test -json github.com/nodedns/nodedns/loadtest/scenario github.com/nodedns/nodedns/loadtest/scenario github.com/nodedns/nodedns/loadtest/scenario ... (17 more arguments)"},
	}
	for _, tt := range tests {
		if got := commandLine(tt.args); got != tt.want {
			t.Errorf("commandLine = %q, want %q", got, tt.want)
		}
	}
}
