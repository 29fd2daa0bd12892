package bench

import (
	"os"
	"strings"
	"testing"
	"time"
)

func TestParseStat(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    ProcStat
		wantCPU time.Duration
		wantErr bool
	}{
		{
			name:    "plain",
			in:      "24355 (cat) R 24345 24345 6637 0 -1 4194304 99 0 0 0 7 3 2 1 20 0 1 0 57782 3133440 389 18446744073709551615 0 0 0\n",
			want:    ProcStat{Utime: 7, Stime: 3, Cutime: 2, Cstime: 1},
			wantCPU: 130 * time.Millisecond,
		},
		{
			name:    "command with spaces and parentheses",
			in:      "17 (a) b (c) S 1 17 17 0 -1 4194560 1 0 0 0 1500 250 0 0 20 0 3 0 10 1000 100 0",
			want:    ProcStat{Utime: 1500, Stime: 250},
			wantCPU: 17500 * time.Millisecond,
		},
		{name: "no command", in: "17 a S 1", wantErr: true},
		{name: "truncated", in: "17 (a) S 1 17 17 0 -1 4194560 1 0 0 0 1500", wantErr: true},
		{name: "not a number", in: "17 (a) S 1 17 17 0 -1 4194560 1 0 0 0 x 250 0 0 20 0 3 0 10", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseStat([]byte(tt.in))
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, want error %v", err, tt.wantErr)
			}
			if tt.wantErr {
				return
			}
			if got != tt.want {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
			if got.CPU() != tt.wantCPU {
				t.Errorf("CPU() = %s, want %s", got.CPU(), tt.wantCPU)
			}
		})
	}
}

func TestParseStatus(t *testing.T) {
	const status = "Name:\tunbound\nUmask:\t0022\nState:\tS (sleeping)\nVmPeak:\t  123456 kB\nVmHWM:\t   18352 kB\nVmRSS:\t   17920 kB\nThreads:\t1\n"
	got, err := ParseStatus([]byte(status))
	if err != nil {
		t.Fatal(err)
	}
	if want := (ProcStatus{VmHWM: 18352 * 1024, VmRSS: 17920 * 1024}); got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
	for _, bad := range []string{
		"Name:\tkthreadd\nThreads:\t1\n", // kernel threads have no Vm lines
		"VmHWM:\t12 MB\nVmRSS:\t1 kB\n",
		"VmHWM:\tx kB\nVmRSS:\t1 kB\n",
	} {
		if _, err := ParseStatus([]byte(bad)); err == nil {
			t.Errorf("ParseStatus(%q): no error", bad)
		}
	}
}

// TestProcSelf reads the live files of this process, so a kernel format
// change shows up here rather than as a zero in the table.
func TestProcSelf(t *testing.T) {
	b, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	if _, err := ParseStat(b); err != nil {
		t.Errorf("/proc/self/stat: %v", err)
	}
	b, err = os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	s, err := ParseStatus(b)
	if err != nil {
		t.Fatalf("/proc/self/status: %v", err)
	}
	if s.VmHWM == 0 || s.VmHWM < s.VmRSS {
		t.Errorf("implausible %+v", s)
	}
}

func TestParseDnsperf(t *testing.T) {
	out, err := os.ReadFile("testdata/dnsperf-2.10.txt")
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParseDnsperf(out)
	if err != nil {
		t.Fatal(err)
	}
	if got.Sent != 52841 || got.Completed != 52841 || got.Lost != 0 {
		t.Errorf("sent/completed/lost = %d/%d/%d, want 52841/52841/0", got.Sent, got.Completed, got.Lost)
	}
	if got.QPS != 16701.692990 {
		t.Errorf("QPS = %v", got.QPS)
	}
	if got.RunTime != 3163811*time.Microsecond {
		t.Errorf("RunTime = %s", got.RunTime)
	}
	if got.AvgLatency != 22265*time.Microsecond {
		t.Errorf("AvgLatency = %s", got.AvgLatency)
	}
	if got.Rcodes["NOERROR"] != 52313 || got.Rcodes["NXDOMAIN"] != 528 {
		t.Errorf("Rcodes = %v", got.Rcodes)
	}

	// dnsperf that failed before its statistics (e.g. server unreachable).
	if _, err := ParseDnsperf([]byte("DNS Performance Testing Tool\nError: invalid port\n")); err == nil {
		t.Error("no error for output without statistics")
	}
	broken := strings.Replace(string(out), "Queries sent:         52841", "Queries sent:         many", 1)
	if _, err := ParseDnsperf([]byte(broken)); err == nil {
		t.Error("no error for a non-numeric count")
	}
}
