package e2e

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

// second is one line of `podtool load`, summed over the clients.
type second struct {
	sent, ok, failed, lost, slow int
	maxMs                        int
}

// readResults sums every client's per-second lines by second.
func readResults(t *testing.T, dir string) map[int64]*second {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*", "load.log"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no client results in %s (%v)", dir, err)
	}
	return readResultFiles(t, files)
}

// readResultFiles sums the per-second lines of the given load.log files.
func readResultFiles(t *testing.T, files []string) map[int64]*second {
	t.Helper()
	secs := map[int64]*second{}
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			var k int64
			var s second
			if _, err := fmt.Sscan(sc.Text(), &k, &s.sent, &s.ok, &s.failed, &s.lost, &s.slow, &s.maxMs); err != nil {
				t.Fatalf("%s: %q: %v", f, sc.Text(), err)
			}
			acc := secs[k]
			if acc == nil {
				acc = &second{}
				secs[k] = acc
			}
			acc.sent += s.sent
			acc.ok += s.ok
			acc.failed += s.failed
			acc.lost += s.lost
			acc.slow += s.slow
			acc.maxMs = max(acc.maxMs, s.maxMs)
		}
		fh.Close()
	}
	return secs
}

// stats sums the seconds of one step.
type stats struct {
	lookups, failed, lost, slow int
	longestGap                  int     // most consecutive seconds with a failed or lost lookup
	longestWait                 int     // ms, the slowest lookup (answered or not)
	bad                         []int64 // those seconds
}

func summarize(secs map[int64]*second, from, to time.Time) stats {
	var st stats
	var keys []int64
	for k := range secs {
		if k >= from.Unix() && k < to.Unix() {
			keys = append(keys, k)
		}
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i] < keys[j] })
	run := 0
	for _, k := range keys {
		s := secs[k]
		st.lookups += s.sent
		st.failed += s.failed
		st.lost += s.lost
		st.slow += s.slow
		st.longestWait = max(st.longestWait, s.maxMs)
		if s.failed+s.lost > 0 {
			st.bad = append(st.bad, k)
			if run > 0 && st.bad[len(st.bad)-2] == k-1 {
				run++
			} else {
				run = 1
			}
			st.longestGap = max(st.longestGap, run)
		}
	}
	return st
}

func (s *stats) add(o stats) {
	s.lookups += o.lookups
	s.failed += o.failed
	s.lost += o.lost
	s.slow += o.slow
	s.longestWait = max(s.longestWait, o.longestWait)
}

// perSecond prints the seconds of [from, to), one line each: what the pods
// saw second by second.
func perSecond(secs map[int64]*second, from, to time.Time) string {
	var b strings.Builder
	b.WriteString("second    sent ok failed lost slow max-ms\n")
	for k := from.Unix(); k < to.Unix(); k++ {
		if s := secs[k]; s != nil {
			fmt.Fprintf(&b, "%s %4d %4d %4d %4d %4d %6d\n", time.Unix(k, 0).UTC().Format("15:04:05"), s.sent, s.ok, s.failed, s.lost, s.slow, s.maxMs)
		}
	}
	return b.String()
}

func (s stats) gap() string {
	if s.longestGap == 0 {
		return "0 s"
	}
	return strconv.Itoa(s.longestGap) + " s"
}

func (s stats) badSeconds() string {
	var out []string
	for _, k := range s.bad {
		out = append(out, time.Unix(k, 0).UTC().Format("15:04:05"))
	}
	return strings.Join(out, " ")
}

// stepLog records when each step of a run began.
type stepLog struct {
	steps []step
}

type step struct {
	name, command string
	expectLoss    string // why this step cannot meet the goal, or ""
	from, to      time.Time
}

// expectLoss marks the current step as one whose losses are known and
// explained by why: reported, not failed.
func (l *stepLog) expectLoss(why string) {
	if n := len(l.steps); n > 0 {
		l.steps[n-1].expectLoss = why
	}
}

func (l *stepLog) begin(name, command string) {
	now := time.Now()
	l.end()
	l.steps = append(l.steps, step{name: name, command: command, from: now})
}

func (l *stepLog) end() {
	if n := len(l.steps); n > 0 && l.steps[n-1].to.IsZero() {
		l.steps[n-1].to = time.Now()
	}
}

func (l *stepLog) duration() time.Duration {
	if len(l.steps) == 0 {
		return 0
	}
	return l.steps[len(l.steps)-1].to.Sub(l.steps[0].from)
}

// TestSummarize: the longest gap is the longest run of consecutive seconds
// with a failed or lost lookup, within the step's seconds only.
func TestSummarize(t *testing.T) {
	secs := map[int64]*second{
		100: {sent: 10, ok: 10},
		101: {sent: 10, ok: 9, failed: 1},
		102: {sent: 10, ok: 8, lost: 2},
		103: {sent: 10, ok: 10, slow: 3, maxMs: 1200},
		104: {sent: 10, ok: 9, failed: 1},
		105: {sent: 10, failed: 10, maxMs: 5000}, // outside the step
	}
	st := summarize(secs, time.Unix(100, 0), time.Unix(105, 0))
	if st.lookups != 50 || st.failed != 2 || st.lost != 2 || st.slow != 3 || st.longestGap != 2 || st.longestWait != 1200 {
		t.Errorf("got %+v, want 50 lookups, 2 failed, 2 lost, 3 slow, longest gap 2, longest wait 1200 ms", st)
	}
}
