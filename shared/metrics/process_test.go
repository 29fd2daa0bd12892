package metrics

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// statLine is a /proc/PID/stat line as Linux writes it, with utime 250,
// stime 50, starttime 492330, vsize 3133440 and rss 380.
const statLine = "18409 (cat) R 18407 18407 6489 0 -1 4194304 101 0 0 0 250 50 0 0 20 0 1 0 492330 3133440 380 18446744073709551615 93889989558272 0 0 0 17 1 0 0\n"

func TestParseStat(t *testing.T) {
	want := procStat{utime: 250, stime: 50, starttime: 492330, vsize: 3133440, rss: 380}
	for _, tc := range []struct {
		name, in string
		want     procStat
		err      string // part of the error, "" for none
	}{
		{"plain", statLine, want, ""},
		{"command with spaces and parentheses", strings.Replace(statLine, "(cat)", "(a) b) (c)", 1), want, ""},
		{"no command", "18409 cat R 1 2", procStat{}, "no command"},
		{"truncated", "1 (x) R 1 2 3", procStat{}, "fields after the command"},
		{"not a number", strings.Replace(statLine, " 250 ", " x ", 1), procStat{}, "field 14"},
		{"empty", "", procStat{}, "no command"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseStat([]byte(tc.in))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("parseStat = %+v, %v; want an error with %q", got, err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("parseStat = %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

// FuzzParseStat checks that no stat content crashes the parser.
func FuzzParseStat(f *testing.F) {
	for _, s := range []string{statLine, "1 (a) b) R", ") ", "1 (x) " + strings.Repeat("1 ", 30)} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if s, err := parseStat(data); err != nil && s != (procStat{}) {
			t.Fatalf("error %v with a non-zero result %+v", err, s)
		}
	})
}

func TestParseBootTimeAndLimit(t *testing.T) {
	stat := "cpu  1 2 3\nintr 5\nbtime 1796113585\nprocesses 9\n"
	if got, err := parseBootTime([]byte(stat)); err != nil || got != 1796113585 {
		t.Errorf("parseBootTime = %d, %v; want 1796113585", got, err)
	}
	for _, in := range []string{"cpu 1\n", "btime x\n", ""} {
		if got, err := parseBootTime([]byte(in)); err == nil {
			t.Errorf("parseBootTime(%q) = %d, want an error", in, got)
		}
	}
	limits := "Limit                     Soft Limit           Hard Limit           Units     \n" +
		"Max open files            20000                40000                files     \n" +
		"Max address space         unlimited            unlimited            bytes     \n" +
		"Max open filesystems      7                    7                    things    \n"
	for _, tc := range []struct {
		resource string
		want     float64
		err      bool
	}{
		{"Max open files", 20000, false},
		{"Max address space", math.Inf(1), false},
		{"Max locked memory", 0, true},
	} {
		got, err := parseLimit([]byte(limits), tc.resource)
		if (err != nil) != tc.err || got != tc.want {
			t.Errorf("parseLimit(%q) = %v, %v; want %v (error %v)", tc.resource, got, err, tc.want, tc.err)
		}
	}
	if _, err := parseLimit([]byte("Max open files            lots                 1                    files\n"), "Max open files"); err == nil {
		t.Error("parseLimit of a non-number: no error")
	}
}

// TestProcessMetricsFromFiles reads a fake procfs: the series are derived
// from the files as the process collector's conventions say, and a file
// that is missing leaves out its series with a comment naming it.
func TestProcessMetricsFromFiles(t *testing.T) {
	root := t.TempDir()
	self := filepath.Join(root, "self")
	for name, data := range map[string]string{
		"stat":        "btime 1796113585\n",
		"self/stat":   statLine,
		"self/limits": "Max open files            20000                20000                files\nMax address space         4096                 unlimited            bytes\n",
		"self/fd/0":   "", "self/fd/1": "", "self/fd/2": "",
	} {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var buf bytes.Buffer
	writeProcessMetrics(&buf, self)
	v, err := parse(buf.Bytes())
	if err != nil {
		t.Fatalf("%v\n%s", err, buf.String())
	}
	page := float64(os.Getpagesize())
	for name, want := range map[string]float64{
		"process_cpu_seconds_total":        3, // (250+50)/100
		"process_resident_memory_bytes":    380 * page,
		"process_virtual_memory_bytes":     3133440,
		"process_start_time_seconds":       1796113585 + 4923.3,
		"process_max_fds":                  20000,
		"process_virtual_memory_max_bytes": 4096,
		"process_open_fds":                 3,
	} {
		if got, ok := v[name]; !ok || math.Abs(got-want) > 1e-6 {
			t.Errorf("%s = %v (present %v), want %v", name, got, ok, want)
		}
	}
	if strings.Contains(buf.String(), "left out") {
		t.Errorf("unexpected error comment:\n%s", buf.String())
	}

	if err := os.Remove(filepath.Join(self, "stat")); err != nil {
		t.Fatal(err)
	}
	buf.Reset()
	writeProcessMetrics(&buf, self)
	text := buf.String()
	if !strings.Contains(text, "# process series left out: ") || !strings.Contains(text, filepath.Join(self, "stat")) {
		t.Errorf("no comment naming the missing stat file:\n%s", text)
	}
	if strings.Contains(text, "process_cpu_seconds_total") || !strings.Contains(text, "\nprocess_open_fds 3\n") {
		t.Errorf("want the stat series left out and the others kept:\n%s", text)
	}
	if _, err := parse(buf.Bytes()); err != nil {
		t.Errorf("output with an error comment does not parse: %v", err)
	}
}

// TestProcessMetricsOfThisProcess reads the real /proc/self.
func TestProcessMetricsOfThisProcess(t *testing.T) {
	if _, err := os.Stat(procSelf); err != nil {
		t.Skipf("no procfs here: %v", err)
	}
	var buf bytes.Buffer
	writeProcessMetrics(&buf, procSelf)
	if strings.Contains(buf.String(), "left out") {
		t.Fatalf("error reading /proc/self:\n%s", buf.String())
	}
	v, err := parse(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	now := float64(time.Now().Unix())
	if start := v["process_start_time_seconds"]; start > now+1 || start < now-3600 {
		t.Errorf("process_start_time_seconds %v, want within the last hour of %v", start, now)
	}
	if rss := v["process_resident_memory_bytes"]; rss < 1<<20 {
		t.Errorf("process_resident_memory_bytes %v, want at least 1 MiB", rss)
	}
	if fds := v["process_open_fds"]; fds < 3 || fds > v["process_max_fds"] {
		t.Errorf("process_open_fds %v, want 3 or more and at most process_max_fds %v", fds, v["process_max_fds"])
	}
}
