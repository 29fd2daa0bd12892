package main

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// TestDiagnosePIDFlags: --pid=N puts the flags of process N before the
// command line's, so the command line's win; it refuses what is not the
// frontend and a missing process.
func TestDiagnosePIDFlags(t *testing.T) {
	proc := t.TempDir()
	write := func(pid string, argv ...string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Join(proc, pid), 0o755); err != nil {
			t.Fatal(err)
		}
		data := strings.Join(argv, "\x00") + "\x00"
		if err := os.WriteFile(filepath.Join(proc, pid, "cmdline"), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("1", "/usr/local/bin/nodedns-frontend", "--mode=iptables", "--listen=169.254.20.10:53")
	write("7", "/bin/sleep", "100")
	for _, tc := range []struct {
		name    string
		args    []string
		want    []string
		wantErr string
	}{
		{"no pid", []string{"--timeout=1s"}, []string{"--timeout=1s"}, ""},
		{"pid=1", []string{"--pid=1", "--mode=link-local"},
			[]string{"--mode=iptables", "--listen=169.254.20.10:53", "--pid=1", "--mode=link-local"}, ""},
		{"-pid 1", []string{"-pid", "1"}, []string{"--mode=iptables", "--listen=169.254.20.10:53", "-pid", "1"}, ""},
		{"not the frontend", []string{"--pid=7"}, nil, "not nodedns-frontend"},
		{"no such process", []string{"--pid=9"}, nil, "read its command line"},
		{"not a number", []string{"--pid=x"}, nil, "not a process ID"},
		{"missing value", []string{"--pid"}, nil, "needs a process ID"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := withProcessFlags(tc.args, proc)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("args = %q, want %q", got, tc.want)
			}
		})
	}
}
